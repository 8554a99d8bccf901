// Chat: a conversation with a chat model; its answers stream in as text deltas and, when
// "spoken answer" is ticked, as a WAV stream played from its first piece (audio.js).
import * as api from "./api.js";
import { StreamPlayer, parseWavHeader, pcm16ToFloat } from "./audio.js";
import { $, h, option } from "./dom.js";
import { addToGallery } from "./gallery.js";

const chat = { messages: [] };

export function resetChat() {
  chat.messages = [];
  $("chat-log").replaceChildren();
}

export function setupChat(knobs) {
  const spoken = (knobs.modalities || []).includes("audio");
  $("chat-spoken-box").hidden = !spoken;
  $("chat-voice-box").hidden = !spoken;
  $("chat-spoken").checked = spoken;
  const voices = knobs.voices || [];
  $("chat-voice").replaceChildren(...voices.map((v) => option(v.id, v.name || v.id)));
}

async function partOf(file) {
  const url = await api.fileToDataURL(file);
  if (file.type.startsWith("image/")) return { type: "image_url", image_url: { url } };
  const format = file.type.includes("mpeg") || file.name.endsWith(".mp3") ? "mp3" : "wav";
  return { type: "input_audio", input_audio: { data: url.slice(url.indexOf(",") + 1), format } };
}

function bubble(role, text) {
  const body = h("span", { class: "text" });
  body.textContent = text;
  const li = h("li", { class: role, "data-testid": "chat-message", "data-role": role }, body);
  $("chat-log").append(li);
  li.scrollIntoView({ block: "end" });
  return { li, body };
}

/** Decodes a streamed WAV answer: the header first, then 16-bit samples (odd bytes kept). */
class WavStream {
  constructor(player) {
    this.player = player;
    this.pending = new Uint8Array(0);
    this.format = null;
  }

  add(bytes) {
    const joined = new Uint8Array(this.pending.length + bytes.length);
    joined.set(this.pending);
    joined.set(bytes, this.pending.length);
    let data = joined;
    if (this.format === null) {
      this.format = parseWavHeader(joined);
      if (this.format === null) {
        this.pending = joined;
        return;
      }
      data = joined.subarray(this.format.offset);
    }
    const even = data.length - (data.length % 2);
    this.pending = data.slice(even);
    if (even) this.player.push(pcm16ToFloat(data.subarray(0, even)), this.format.rate);
  }
}

export async function sendChat({ model, knobs }) {
  const input = $("chat-input");
  const text = input.value.trim();
  const files = [...$("chat-attach").files];
  if (!text && !files.length) throw new Error("type a message");
  const parts = await Promise.all(files.map(partOf));
  const content = parts.length ? [...(text ? [{ type: "text", text }] : []), ...parts] : text;
  const user = bubble("user", text);
  for (const file of files) user.li.append(h("div", { class: "attachment" }, `attached: ${file.name}`));
  input.value = "";
  $("chat-attach").value = "";
  chat.messages.push({ role: "user", content });
  const spoken = !$("chat-spoken-box").hidden && $("chat-spoken").checked;
  const body = { model, messages: chat.messages.slice(), stream: true };
  if (spoken) {
    body.modalities = ["text", "audio"];
    body.audio = { voice: $("chat-voice").value || undefined, format: "wav" };
  } else if ((knobs.modalities || []).includes("audio")) {
    body.modalities = ["text"];
  }
  const answer = bubble("assistant", "");
  answer.li.dataset.streaming = "true";
  let audio = null;
  let wav = null;
  if (spoken) {
    audio = h("audio", { "data-testid": "result-audio", controls: true });
    answer.li.append(audio);
    wav = new WavStream(new StreamPlayer(audio));
  }
  let reply = "";
  let deltas = 0;
  try {
    const response = await api.call("/v1/chat/completions", { method: "POST", json: body });
    for await (const chunk of api.events(response)) {
      if (chunk.error) throw new Error(chunk.error.message);
      for (const choice of chunk.choices || []) {
        const delta = choice.delta || {};
        if (typeof delta.content === "string" && delta.content) {
          reply += delta.content;
          deltas += 1;
          answer.body.textContent = reply;
          answer.li.dataset.deltas = String(deltas);
        }
        if (wav && delta.audio && delta.audio.data) {
          wav.add(api.b64ToBytes(delta.audio.data));
          if (!audio.dataset.startedAt && wav.player.startedAt !== null) {
            audio.dataset.startedAt = String(wav.player.startedAt);
          }
        }
      }
    }
  } catch (error) {
    chat.messages.pop();
    answer.li.remove();
    throw error;
  } finally {
    delete answer.li.dataset.streaming;
  }
  answer.li.dataset.done = "true";
  if (audio) {
    audio.dataset.doneAt = String(performance.now());
    const url = wav.player.finish();
    if (url !== null) answer.li.append(h("a", { class: "download", href: url, download: "answer.wav" }, "Download WAV"));
  }
  // The conversation goes back as text; the server refuses NUL characters in messages (a
  // model with random weights may say them).
  chat.messages.push({ role: "assistant", content: reply.replaceAll("\u0000", "") });
  const thumb = h("span", { class: "muted" }, reply.slice(0, 120));
  addToGallery({ title: text || "(attachments)", model, thumb, request: { kind: "chat", path: "/v1/chat/completions", body } });
}

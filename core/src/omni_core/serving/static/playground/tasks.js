// The tasks of the generate panel: images, edits, a video job, streamed speech. Each shows
// its result, the request's timings, and adds the result to the gallery.
import * as api from "./api.js";
import { StreamPlayer, pcm16ToFloat } from "./audio.js";
import { $, h, sleep } from "./dom.js";
import { addToGallery } from "./gallery.js";

const ACTIVE = new Set(["queued", "in_progress"]);

function result(...children) {
  $("result").replaceChildren(...children);
}

function timings(text) {
  $("timings").textContent = text;
}

const seconds = (ms) => `${(ms / 1000).toFixed(2)} s`;

function blobOf(b64, type) {
  return new Blob([api.b64ToBytes(b64)], { type });
}

function formOf(fields, files) {
  const form = new FormData();
  for (const [name, value] of Object.entries(fields)) {
    form.append(name, typeof value === "string" ? value : JSON.stringify(value));
  }
  for (const [name, file] of files) form.append(name, file);
  return form;
}

function thumbOf(el) {
  const copy = el.cloneNode(false);
  copy.removeAttribute("data-testid");
  copy.className = "thumb";
  return copy;
}

async function images({ model, path, task }, { fields, files }, prompt) {
  const edit = task === "edit";
  if (edit && !files.some(([name]) => name === "image")) throw new Error("choose one or more images to edit");
  const body = { model, prompt, ...fields, response_format: "b64_json" };
  const t0 = performance.now();
  const response = edit
    ? await api.call(path, { method: "POST", form: formOf(body, files) })
    : await api.call(path, { method: "POST", json: body });
  const data = await response.json();
  const ms = performance.now() - t0;
  const grid = h("div", { class: "results-grid" });
  result(grid);
  const format = data.output_format || "png";
  for (const item of data.data) {
    const url = URL.createObjectURL(blobOf(item.b64_json, `image/${format}`));
    const img = h("img", { "data-testid": "result-image", alt: "generated image", src: url });
    grid.append(img);
    await img.decode();
    img.dataset.decoded = "true";
    const request = edit
      ? { kind: "edit", path, fields: body, files: files.map(([name, f]) => [name, f.name]) }
      : { kind: "image", path, body };
    addToGallery({ title: prompt, model, thumb: thumbOf(img), request });
  }
  const steps = data.usage && data.usage.steps ? ` · ${data.usage.steps} steps` : "";
  timings(`${data.data.length} image(s) in ${seconds(ms)}${steps}`);
}

function setProgress(bar, value) {
  bar.value = value;
  const seen = bar.dataset.seen ? bar.dataset.seen.split(",") : [];
  if (seen[seen.length - 1] !== String(value)) seen.push(String(value));
  bar.dataset.seen = seen.join(",");
}

async function video({ model, path }, { fields, files }, prompt) {
  const body = { model, prompt, ...fields };
  const bar = $("progress");
  bar.hidden = false;
  bar.dataset.seen = "";
  setProgress(bar, 0);
  result();
  const t0 = performance.now();
  const response = files.length
    ? await api.call(path, { method: "POST", form: formOf(body, files) })
    : await api.call(path, { method: "POST", json: body });
  let job = await response.json();
  const id = encodeURIComponent(job.id);
  while (ACTIVE.has(job.status)) {
    setProgress(bar, job.progress || 0);
    timings(`${job.status.replace("_", " ")} · ${job.progress || 0}% · ${seconds(performance.now() - t0)}`);
    await sleep(100);
    job = await api.getJSON(`/v1/videos/${id}`);
  }
  if (job.status !== "completed") {
    const error = job.error || {};
    throw new Error(error.message || `the video job ended ${job.status}`);
  }
  setProgress(bar, 100);
  const content = await api.call(`/v1/videos/${id}/content`);
  const url = URL.createObjectURL(await content.blob());
  const player = h("video", {
    "data-testid": "result-video",
    src: url,
    controls: true,
    loop: true,
    muted: true,
    autoplay: true,
    playsinline: true,
  });
  const link = h("a", { class: "download", href: url, download: `${job.id}.mp4`, "data-testid": "download" }, "Download MP4");
  result(player, h("div", {}, link));
  timings(`video ${job.size} in ${seconds(performance.now() - t0)}`);
  const request = files.length
    ? { kind: "video", path, fields: body, files: files.map(([name, f]) => [name, f.name]) }
    : { kind: "video", path, body };
  addToGallery({ title: prompt, model, thumb: thumbOf(player), request });
}

/** Streamed speech: SSE deltas of 16-bit PCM played as they come (audio.js). */
async function speech({ model, path }, { fields }, prompt) {
  const body = { model, input: prompt, ...fields, stream_format: "sse" };
  const audio = h("audio", { "data-testid": "result-audio", controls: true });
  result(audio);
  const t0 = performance.now();
  const response = await api.call(path, { method: "POST", json: body });
  const rate = parseInt(response.headers.get("x-omni-sample-rate") || "24000", 10);
  const player = new StreamPlayer(audio);
  let chunks = 0;
  let firstMs = null;
  for await (const event of api.events(response)) {
    if (event.type === "error") throw new Error(event.error.message);
    if (event.type !== "speech.audio.delta") continue;
    const samples = pcm16ToFloat(api.b64ToBytes(event.audio));
    if (!samples.length) continue;
    player.push(samples, rate);
    chunks += 1;
    if (firstMs === null) {
      firstMs = performance.now() - t0;
      audio.dataset.startedAt = String(player.startedAt);
      audio.dataset.playingOnStart = String(!audio.paused);
    }
    audio.dataset.chunks = String(chunks);
  }
  audio.dataset.doneAt = String(performance.now());
  const url = player.finish();
  if (url === null) throw new Error("the answer held no audio");
  const link = h("a", { class: "download", href: url, download: "speech.wav", "data-testid": "download" }, "Download WAV");
  $("result").append(h("div", {}, link));
  timings(`first audio after ${seconds(firstMs)} · ${player.seconds.toFixed(2)} s of audio in ${chunks} piece(s) · ${seconds(performance.now() - t0)} in all`);
  const thumb = h("span", { class: "muted" }, `${player.seconds.toFixed(2)} s of speech`);
  addToGallery({ title: prompt, model, thumb, request: { kind: "speech", path, body } });
}

export async function runTask(where, form) {
  const prompt = $("prompt").value;
  if (!prompt.trim()) throw new Error(where.task === "speech" ? "type the text to speak" : "type a prompt");
  $("progress").hidden = where.task !== "video";
  timings("");
  if (where.task === "video") return video(where, form, prompt);
  if (where.task === "speech") return speech(where, form, prompt);
  return images(where, form, prompt);
}

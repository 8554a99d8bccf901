// The playground's entry: the API key, the served models (/v1/models and each model's
// /v1/models/{id}/knobs) and the form of the chosen model and task. The tasks themselves run
// in tasks.js and chat.js.
import * as api from "./api.js";
import { $, clearError, h, option, showError } from "./dom.js";
import { addToGallery } from "./gallery.js";
import { runTask } from "./tasks.js";
import { resetChat, sendChat, setupChat } from "./chat.js";

/** Routes of the API -> the task they are in this page. */
const TASKS = {
  "/v1/images/generations": ["image", "Generate images"],
  "/v1/images/edits": ["edit", "Edit images"],
  "/v1/videos": ["video", "Generate a video"],
  "/v1/audio/speech": ["speech", "Speech"],
  "/v1/chat/completions": ["chat", "Chat"],
};
const PATHS = Object.fromEntries(Object.entries(TASKS).map(([path, [task]]) => [task, path]));
/** The shared fields this page renders itself (the rest of a route's fields it sets alone). */
const SHARED = {
  negative_prompt: { label: "Negative prompt", type: "text" },
  size: { label: "Size (WxH)", type: "text", placeholder: "model default" },
  n: { label: "Images", type: "integer", min: 1, placeholder: "1" },
  seed: { label: "Seed", type: "integer", min: 0, placeholder: "random" },
  num_inference_steps: { label: "Steps", type: "integer", min: 1, placeholder: "model default" },
  guidance_scale: { label: "Guidance", type: "number", min: 0, step: 0.1, placeholder: "model default" },
  num_frames: { label: "Frames", type: "integer", min: 1, placeholder: "model default" },
  speed: { label: "Speed", type: "number", min: 0.25, max: 4, step: 0.05, placeholder: "1.0" },
};

const page = {
  models: [],
  knobs: new Map(),
  model: null,
  task: null,
  /** The inputs of the form: { name, el, type, file } (collect() reads them). */
  inputs: [],
};

function sharedInput(name, spec, value) {
  const attrs = { id: `field-${name}`, "data-testid": `field-${name}`, placeholder: spec.placeholder };
  let el;
  if (spec.type === "text") el = h("input", { ...attrs, type: "text" });
  else {
    el = h("input", {
      ...attrs,
      type: "number",
      min: spec.min,
      max: spec.max,
      step: spec.step || (spec.type === "integer" ? 1 : "any"),
    });
  }
  if (value !== undefined && value !== null) el.value = String(value);
  page.inputs.push({ name, el, type: spec.type });
  return h("label", {}, spec.label, el);
}

/** One input for a property of the model's extras schema. */
function extraInput(name, schema, defs) {
  let prop = schema;
  if (prop.$ref) prop = defs[prop.$ref.split("/").pop()] || {};
  if (prop.anyOf) prop = prop.anyOf.find((p) => p.type !== "null") || {};
  const label = schema.title || name;
  const attrs = { id: `field-${name}`, "data-testid": `field-${name}`, title: schema.description };
  let el;
  let type = prop.type || "string";
  if (prop.enum) {
    el = h("select", attrs, option("", "default"), prop.enum.map((v) => option(String(v), String(v))));
    type = prop.type === "integer" || prop.type === "number" ? prop.type : "string";
  } else if (type === "boolean") {
    el = h("select", attrs, option("", "default"), option("true", "true"), option("false", "false"));
  } else if (type === "integer" || type === "number") {
    el = h("input", {
      ...attrs,
      type: "number",
      min: prop.minimum ?? prop.exclusiveMinimum,
      max: prop.maximum ?? prop.exclusiveMaximum,
      step: type === "integer" ? 1 : "any",
      placeholder: schema.default !== undefined && schema.default !== null ? String(schema.default) : "default",
    });
  } else if (type === "string") {
    el = h("input", { ...attrs, type: "text", placeholder: String(schema.default ?? "default"), maxlength: prop.maxLength });
  } else {
    return null; // lists and objects: not a form field (send them from code)
  }
  page.inputs.push({ name, el, type });
  return h("label", {}, label, el);
}

function fileInput(name, label, { multiple = false, accept = "image/*" } = {}) {
  const el = h("input", { type: "file", id: `field-${name}`, "data-testid": `field-${name}`, accept, multiple });
  page.inputs.push({ name, el, type: "file" });
  return h("label", {}, label, el);
}

/** The form's values that were set, typed: { fields, files: [[name, File], ...] }. */
export function collect() {
  const fields = {};
  const files = [];
  for (const { name, el, type } of page.inputs) {
    if (type === "file") {
      for (const file of el.files) files.push([name, file]);
      continue;
    }
    const raw = el.value.trim();
    if (raw === "") continue;
    if (name === "lora") fields.lora = [{ name: raw, scale: 1.0 }];
    else if (type === "integer") fields[name] = parseInt(raw, 10);
    else if (type === "number") fields[name] = parseFloat(raw);
    else if (type === "boolean") fields[name] = raw === "true";
    else fields[name] = raw;
  }
  return { fields, files };
}

export function current() {
  return { model: page.model, knobs: page.knobs.get(page.model), task: page.task, path: PATHS[page.task] };
}

function voiceOptions(select, voices, keep) {
  select.replaceChildren(
    ...voices.map((v) => option(v.id, v.language ? `${v.name || v.id} (${v.language})` : v.name || v.id, v.id === keep)),
  );
}

/** The voices of a speech model (its own and uploaded ones), from /v1/audio/voices. */
export async function refreshVoices(select, model, keep) {
  const list = await api.getJSON(`/v1/audio/voices?model=${encodeURIComponent(model)}`);
  const voices = list.data.filter((v) => v.model === model);
  voiceOptions(select, voices, keep);
  return voices;
}

async function renderSpeech(box, knobs) {
  const voice = h("select", { id: "voice-select", "data-testid": "voice-select" });
  page.inputs.push({ name: "voice", el: voice, type: "string" });
  const language = h("select", { id: "language-select", "data-testid": "language-select" }, option("", "Auto"));
  page.inputs.push({ name: "language", el: language, type: "string" });
  box.append(h("label", {}, "Voice", voice), h("label", {}, "Language", language));
  voiceOptions(voice, knobs.voices || []);
  const voices = await refreshVoices(voice, knobs.id);
  const languages = [...new Set(voices.map((v) => v.language).filter(Boolean))].sort();
  language.append(...languages.map((l) => option(l, l)));
  $("voice-box").hidden = !knobs.clones_voices;
}

async function renderForm() {
  const { knobs, task, path } = current();
  page.inputs = [];
  const taskBox = $("task-inputs");
  const knobBox = $("knobs");
  taskBox.replaceChildren();
  knobBox.replaceChildren();
  $("voice-box").hidden = true;
  const chat = task === "chat";
  $("chat-panel").hidden = !chat;
  $("generate-panel").hidden = chat;
  if (chat) {
    setupChat(knobs);
    return;
  }
  const fields = knobs.routes[path] || [];
  const defaults = knobs.defaults || {};
  $("prompt").placeholder = task === "speech" ? "Text to speak" : "Describe what to make";
  if (task === "edit") taskBox.append(fileInput("image", "Images to edit", { multiple: true }));
  if (task === "video" && knobs.tasks.some((t) => t === "i2v" || t === "ti2v")) {
    taskBox.append(fileInput("input_reference", "First frame (optional)"));
  }
  if (task === "speech") await renderSpeech(taskBox, knobs);
  const prefilled = { size: defaults.size, num_frames: defaults.num_frames };
  for (const name of fields) {
    const spec = SHARED[name];
    if (!spec) continue;
    const limits = knobs.limits || {};
    const bounded = name === "n" ? { ...spec, max: limits.max_outputs } : spec;
    const el = sharedInput(name, bounded, prefilled[name]);
    const hint = name === "num_inference_steps" ? limits.max_steps : name === "num_frames" ? limits.max_frames : null;
    if (hint) el.querySelector("input").max = String(hint);
    knobBox.append(el);
  }
  const adapters = (knobs.lora && knobs.lora.adapters) || [];
  if (fields.includes("lora") && adapters.length) {
    const select = h("select", { id: "field-lora", "data-testid": "field-lora" }, option("", "none"), adapters.map((a) => option(a.name, a.name)));
    page.inputs.push({ name: "lora", el: select, type: "string" });
    knobBox.append(h("label", {}, "LoRA", select));
  }
  const extras = knobs.extras || {};
  for (const [name, schema] of Object.entries(extras.properties || {})) {
    if (fields.includes(name) || SHARED[name]) continue;
    const el = extraInput(name, schema, extras.$defs || {});
    if (el) knobBox.append(el);
  }
  if (defaults.fps) knobBox.append(h("span", { class: "muted" }, `${defaults.fps} fps`));
}

async function selectModel(id) {
  page.model = id;
  const knobs = page.knobs.get(id);
  const tasks = Object.keys(knobs.routes).filter((path) => TASKS[path]);
  $("task-select").replaceChildren(...tasks.map((path) => option(TASKS[path][0], TASKS[path][1])));
  $("model-info").textContent = [knobs.modality, knobs.tasks.join(", ")].join(" · ");
  page.task = tasks.length ? TASKS[tasks[0]][0] : null;
  resetChat();
  await renderForm();
}

async function loadModels() {
  clearError();
  let list;
  try {
    list = await api.getJSON("/v1/models");
  } catch (error) {
    if (error.status === 401) {
      $("key-needed").hidden = false;
      $("api-key").focus();
    }
    showError(error);
    return;
  }
  $("key-needed").hidden = true;
  const ready = list.data.filter((m) => m.status === "ready");
  const knobs = await Promise.all(
    ready.map((m) => api.getJSON(`/v1/models/${encodeURIComponent(m.id)}/knobs`).catch(() => null)),
  );
  page.knobs = new Map(knobs.filter(Boolean).map((k) => [k.id, k]));
  page.models = ready.filter((m) => page.knobs.has(m.id));
  const select = $("model-select");
  select.replaceChildren(
    ...page.models.map((m) => option(m.id, `${m.id} (${m.modality})`)),
    ...list.data.filter((m) => m.status !== "ready").map((m) => {
      const el = option(m.id, `${m.id} (${m.status})`);
      el.disabled = true;
      return el;
    }),
  );
  document.body.dataset.models = String(page.models.length);
  if (page.models.length) await selectModel(page.models[0].id);
  else showError(new Error("no model is ready yet: reload in a moment"));
}

function busy(on) {
  for (const id of ["generate", "chat-send"]) $(id).disabled = on;
}

async function guarded(fn) {
  clearError();
  busy(true);
  try {
    await fn();
  } catch (error) {
    showError(error);
  } finally {
    busy(false);
  }
}

function setup() {
  const stored = api.loadKey();
  $("api-key").value = stored.key;
  $("remember-key").checked = stored.remembered;
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    api.setKey($("api-key").value, $("remember-key").checked);
    loadModels();
  });
  $("remember-key").addEventListener("change", () => api.setKey($("api-key").value, $("remember-key").checked));
  $("model-select").addEventListener("change", (e) => guarded(() => selectModel(e.target.value)));
  $("task-select").addEventListener("change", (e) => {
    page.task = e.target.value;
    guarded(renderForm);
  });
  $("generate").addEventListener("click", () => guarded(() => runTask(current(), collect())));
  $("chat-send").addEventListener("click", () => guarded(() => sendChat(current())));
  $("chat-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      if (!$("chat-send").disabled) $("chat-send").click();
    }
  });
  $("chat-clear").addEventListener("click", resetChat);
  $("voice-upload").addEventListener("click", () => guarded(uploadVoice));
  loadModels();
}

async function uploadVoice() {
  const { model } = current();
  const file = $("voice-file").files[0];
  const name = $("voice-name").value.trim();
  if (!file || !name) throw new Error("choose an audio file and a name for the voice");
  if (!$("voice-consent").checked) throw new Error("tick the consent box: the speaker must agree to be cloned");
  const form = new FormData();
  const fields = { name, consent: "true", model };
  const transcript = $("voice-transcript").value.trim();
  if (transcript) fields.transcript = transcript;
  for (const [k, v] of Object.entries(fields)) form.append(k, v);
  form.append("audio", file);
  await api.call("/v1/audio/voices", { method: "POST", form });
  await refreshVoices($("voice-select"), model, name);
  addToGallery({
    title: `voice "${name}" uploaded`,
    model,
    thumb: null,
    request: { kind: "voice", path: "/v1/audio/voices", fields, files: [["audio", file.name]] },
  });
}

setup();

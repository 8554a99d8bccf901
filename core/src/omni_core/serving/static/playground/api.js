// Requests to this server only: relative URLs, same-origin mode, no cookies; the API key is
// held here (memory) and in localStorage only when the user ticks "remember".

const REMEMBER = "omni.playground.apiKey";
let apiKey = "";

export function loadKey() {
  try {
    apiKey = window.localStorage.getItem(REMEMBER) || "";
  } catch {
    apiKey = "";
  }
  return { key: apiKey, remembered: apiKey !== "" };
}

export function setKey(key, remember) {
  apiKey = key.trim();
  try {
    if (remember && apiKey) window.localStorage.setItem(REMEMBER, apiKey);
    else window.localStorage.removeItem(REMEMBER);
  } catch {
    /* storage refused (private mode): the key stays in memory */
  }
}

export class APIError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.code = error.code || null;
    this.param = error.param || null;
  }
}

function headers(extra) {
  const out = { ...extra };
  if (apiKey) out.Authorization = `Bearer ${apiKey}`;
  return out;
}

/** fetch() of this server's `path` (never another origin); errors become APIError. */
export async function call(path, { method = "GET", json, form, signal } = {}) {
  if (!path.startsWith("/")) throw new Error("same-origin paths only");
  const init = { method, mode: "same-origin", credentials: "omit", cache: "no-store", signal };
  if (json !== undefined) {
    init.headers = headers({ "Content-Type": "application/json" });
    init.body = JSON.stringify(json);
  } else {
    init.headers = headers({});
    if (form !== undefined) init.body = form;
  }
  const response = await fetch(path, init);
  if (!response.ok) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    throw new APIError(response.status, body);
  }
  return response;
}

export async function getJSON(path) {
  return (await call(path)).json();
}

/** The `data:` payloads of a server-sent event stream, parsed, as they arrive. */
export async function* events(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).trimStart())
        .join("\n");
      if (!data) continue;
      if (data === "[DONE]") return;
      yield JSON.parse(data);
    }
  }
}

export function b64ToBytes(b64) {
  const text = atob(b64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

export function bytesToB64(bytes) {
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(text);
}

export function fileToDataURL(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

// Streamed audio: 16-bit PCM pieces are scheduled on a Web Audio clock as they arrive and
// played through an <audio> element (a MediaStream), so sound starts with the first piece;
// when the stream ends the element gets the whole answer as a WAV file (replay, download).

export function pcm16ToFloat(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(Math.floor(bytes.byteLength / 2));
  for (let i = 0; i < out.length; i++) out[i] = view.getInt16(2 * i, true) / 32768;
  return out;
}

/** A WAV stream's header -> { rate, offset of the samples } (null until it is complete). */
export function parseWavHeader(bytes) {
  if (bytes.length < 12) return null;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const tag = (at) => String.fromCharCode(...bytes.subarray(at, at + 4));
  if (tag(0) !== "RIFF" || tag(8) !== "WAVE") throw new Error("not a WAV stream");
  let at = 12;
  let rate = null;
  while (at + 8 <= bytes.length) {
    const id = tag(at);
    const size = view.getUint32(at + 4, true);
    if (id === "data") return rate === null ? null : { rate, offset: at + 8 };
    if (id === "fmt " && at + 16 <= bytes.length) rate = view.getUint32(at + 12, true);
    at += 8 + size + (size % 2);
  }
  return null;
}

export function wavBlob(chunks, rate) {
  const length = chunks.reduce((n, c) => n + c.length, 0);
  const buffer = new ArrayBuffer(44 + 2 * length);
  const view = new DataView(buffer);
  const put = (at, text) => [...text].forEach((ch, i) => view.setUint8(at + i, ch.charCodeAt(0)));
  put(0, "RIFF");
  view.setUint32(4, 36 + 2 * length, true);
  put(8, "WAVE");
  put(12, "fmt ");
  view.setUint32(16, 16, true);
  view.setUint16(20, 1, true);
  view.setUint16(22, 1, true);
  view.setUint32(24, rate, true);
  view.setUint32(28, 2 * rate, true);
  view.setUint16(32, 2, true);
  view.setUint16(34, 16, true);
  put(36, "data");
  view.setUint32(40, 2 * length, true);
  let at = 44;
  for (const chunk of chunks) {
    for (let i = 0; i < chunk.length; i++, at += 2) {
      view.setInt16(at, Math.max(-1, Math.min(1, chunk[i])) * 32767, true);
    }
  }
  return new Blob([buffer], { type: "audio/wav" });
}

export class StreamPlayer {
  /** `element`: the <audio> that plays the stream, then the finished file. */
  constructor(element) {
    this.element = element;
    this.chunks = [];
    this.rate = null;
    this.context = null;
    this.next = 0;
    this.startedAt = null;
  }

  push(samples, rate) {
    if (!samples.length) return;
    if (this.context === null) this.start(rate);
    this.chunks.push(samples);
    const buffer = this.context.createBuffer(1, samples.length, this.rate);
    buffer.copyToChannel(samples, 0);
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.destination);
    const at = Math.max(this.next, this.context.currentTime + 0.05);
    source.start(at);
    this.next = at + buffer.duration;
  }

  start(rate) {
    this.rate = rate;
    this.context = new AudioContext({ sampleRate: rate });
    this.destination = this.context.createMediaStreamDestination();
    this.element.srcObject = this.destination.stream;
    const playing = this.element.play();
    if (playing && playing.catch) playing.catch(() => {});
    this.context.resume();
    this.startedAt = performance.now();
  }

  /** The stream ended: once what is scheduled has played, the element holds the whole file. */
  finish() {
    if (this.context === null) return null;
    const blob = wavBlob(this.chunks, this.rate);
    const url = URL.createObjectURL(blob);
    const left = Math.max(0, this.next - this.context.currentTime);
    const context = this.context;
    window.setTimeout(() => {
      this.element.srcObject = null;
      this.element.src = url;
      this.element.dataset.complete = "true";
      context.close();
    }, left * 1000 + 100);
    return url;
  }

  get seconds() {
    return this.chunks.reduce((n, c) => n + c.length, 0) / (this.rate || 1);
  }
}

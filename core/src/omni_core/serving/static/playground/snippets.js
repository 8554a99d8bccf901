// The exact request of a result as a copyable curl line and a Python (openai) script. The key
// is never written out: both read it from $OMNI_API_KEY.

function shellQuote(text) {
  return `'${String(text).replaceAll("'", "'\\''")}'`;
}

/** A JSON value as Python source (True/False/None, str reprs JSON writes the same way). */
export function py(value, indent = "") {
  if (value === null || value === undefined) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value === "number" || typeof value === "string") return JSON.stringify(value);
  const inner = indent + "    ";
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return `[\n${value.map((v) => inner + py(v, inner)).join(",\n")},\n${indent}]`;
  }
  const keys = Object.keys(value);
  if (!keys.length) return "{}";
  const items = keys.map((k) => `${inner}${JSON.stringify(k)}: ${py(value[k], inner)}`);
  return `{\n${items.join(",\n")},\n${indent}}`;
}

function kwargs(body, known, indent = "    ") {
  const lines = [];
  const extra = {};
  for (const [name, value] of Object.entries(body)) {
    if (known.includes(name)) lines.push(`${indent}${name}=${py(value, indent)},`);
    else extra[name] = value;
  }
  if (Object.keys(extra).length) lines.push(`${indent}extra_body=${py(extra, indent)},`);
  return lines.join("\n");
}

const AUTH = '-H "Authorization: Bearer $OMNI_API_KEY"';

/** `request`: { path, body (JSON) | fields + files (multipart), kind }. */
export function curl(origin, request) {
  const lines = [`curl -sS ${origin}${request.path}`, `  ${AUTH}`];
  if (request.files) {
    for (const [name, value] of Object.entries(request.fields)) {
      const text = typeof value === "string" ? value : JSON.stringify(value);
      lines.push(`  -F ${shellQuote(`${name}=${text}`)}`);
    }
    for (const [name, file] of request.files) lines.push(`  -F ${shellQuote(`${name}=@${file}`)}`);
  } else {
    lines.push('  -H "Content-Type: application/json"', `  -d ${shellQuote(JSON.stringify(request.body))}`);
  }
  if (request.kind === "speech") lines.push("  --no-buffer");
  return lines.join(" \\\n");
}

export function python(origin, request) {
  const head = [
    "import os",
    "",
    "from openai import OpenAI",
    "",
    `client = OpenAI(base_url=${py(origin + "/v1")}, api_key=os.environ["OMNI_API_KEY"])`,
  ];
  const body = { ...(request.body || request.fields) };
  let code;
  switch (request.kind) {
    case "image":
      code = [
        "result = client.images.generate(",
        kwargs(body, ["model", "prompt", "n", "size", "response_format"]),
        ")",
        "import base64",
        'open("image.png", "wb").write(base64.b64decode(result.data[0].b64_json))',
      ];
      break;
    case "edit": {
      const files = request.files.map(([, name]) => `open(${py(name)}, "rb")`).join(", ");
      code = [
        "result = client.images.edit(",
        `    image=[${files}],`,
        kwargs(body, ["model", "prompt", "n", "size", "response_format"]),
        ")",
        "import base64",
        'open("image.png", "wb").write(base64.b64decode(result.data[0].b64_json))',
      ];
      break;
    }
    case "video": {
      const refs = request.files || [];
      code = [
        "video = client.videos.create_and_poll(",
        refs.length ? `    input_reference=open(${py(refs[0][1])}, "rb"),` : null,
        kwargs(body, ["model", "prompt", "size", "seconds"]),
        ")",
        'client.videos.download_content(video.id).write_to_file("video.mp4")',
      ].filter((line) => line !== null);
      break;
    }
    case "speech":
      code = [
        "import base64, json",
        "",
        'with open("speech.pcm", "wb") as pcm, client.audio.speech.with_streaming_response.create(',
        kwargs(body, ["model", "input", "voice", "response_format", "speed", "stream_format"]),
        ") as response:",
        "    for line in response.iter_lines():  # server-sent events: 16-bit PCM deltas",
        '        if line.startswith("data: "):',
        "            event = json.loads(line[6:])",
        '            if event["type"] == "speech.audio.delta":',
        '                pcm.write(base64.b64decode(event["audio"]))',
      ];
      break;
    case "voice":
      code = [
        "import httpx",
        "",
        "httpx.post(",
        `    ${py(origin + "/v1/audio/voices")},`,
        '    headers={"Authorization": f"Bearer {os.environ[\'OMNI_API_KEY\']}"},',
        `    data=${py(body, "    ")},`,
        `    files={"audio": open(${py(request.files[0][1])}, "rb")},`,
        ").raise_for_status()",
      ];
      head.splice(2, 3);
      break;
    default:
      code = [
        "stream = client.chat.completions.create(",
        kwargs(body, ["model", "messages", "modalities", "audio", "stream", "max_tokens", "temperature", "seed"]),
        ")",
        "for chunk in stream:",
        "    if chunk.choices and chunk.choices[0].delta.content:",
        '        print(chunk.choices[0].delta.content, end="", flush=True)',
      ];
  }
  return [...head, "", ...code].join("\n");
}

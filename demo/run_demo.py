"""The omni demo (`nox -s demo`): the main job, end to end, on this machine.

It builds TINY RANDOM-WEIGHT checkpoints -- real diffusers/transformers layouts, random weights,
so the outputs are noise, not pictures or words -- with each installed model plugin's
``omni_<pkg>.testing`` builder, then runs the real CLI on them:

    omni generate video <tiny wan>   "..." -o out/video.mp4
    omni generate image <tiny qwen>  "..." -o out/image.png
    omni generate speech "..." --model <tiny tts> -o out/speech.wav
    omni generate chat <tiny qwen2.5-omni> "..." -o out/chat.wav   (the text on stdout)

and then starts ``omni serve`` ONCE on 127.0.0.1 (a free port) with those checkpoints, a tiny
Qwen-Image-Edit checkpoint and the default Piper voice (``omni-tts[piper]``; the tiny VITS
checkpoint when Piper is not installed), waits for ``/health``, and makes one request of each
kind with the official ``openai`` client:

    images.generate -> out/server-image.png     images.edit -> out/server-edit.png
    videos.create + poll + download_content -> out/server-video.mp4
    audio.speech.create -> out/server-speech.wav
    chat.completions.create(modalities=["text", "audio"]) -> out/server-chat.wav

The server is always stopped (SIGTERM, then SIGKILL after a grace period), failure included; its
log is out/server.log. Any failed step makes the demo exit non-zero. A family whose plugin or
builder is not there yet is skipped with a printed note.
"""

from __future__ import annotations

import argparse
import base64
import importlib
import importlib.util
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Family:
    """A model family: how to build its tiny checkpoint and how to generate with it."""

    name: str
    builder: str  # "module:function"
    builder_kwargs: dict[str, str]
    command: list[str]  # after `omni generate`; {model} and {out} are filled in
    output: str
    #: Options sized for a tiny checkpoint on a CPU; only those `--help` lists are passed.
    small: dict[str, str] = field(default_factory=dict)


FAMILIES = [
    Family(
        name="wan (video)",
        builder="omni_wan.testing:build_tiny_wan",
        builder_kwargs={"variant": "t2v"},
        command=["video", "{model}", "a red fox running through snow", "-o", "{out}"],
        output="video.mp4",
        small={
            "--height": "64",
            "--width": "64",
            "--num-frames": "9",
            "--frames": "9",
            "--steps": "4",
            "--seed": "0",
        },
    ),
    Family(
        name="qwen-image (image)",
        builder="omni_qwen.testing:build_tiny_qwen_image",
        builder_kwargs={"variant": "t2i"},
        command=["image", "{model}", "a lighthouse at dusk, oil painting", "-o", "{out}"],
        output="image.png",
        small={"--height": "64", "--width": "64", "--steps": "4", "--seed": "0"},
    ),
    Family(
        name="tts (speech)",
        builder="omni_tts.testing:build_tiny_tts",
        builder_kwargs={"family": "vits"},
        command=["speech", "Hello from omni.", "--model", "{model}", "-o", "{out}"],
        output="speech.wav",
        small={"--seed": "0"},
    ),
    Family(
        name="qwen2.5-omni (chat)",
        builder="omni_qwen.testing:build_tiny_qwen25_omni",
        builder_kwargs={},
        command=["chat", "{model}", "Hello, who are you?", "-o", "{out}"],
        output="chat.wav",
        small={"--max-tokens": "8", "--seed": "0"},
    ),
]


@dataclass
class Context:
    out: Path
    work: Path
    checkpoints: dict[str, Path] = field(default_factory=dict)
    produced: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)


def omni(*args: str, check: bool = True, quiet: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real `omni` CLI of this interpreter's environment."""
    command = [sys.executable, "-m", "omni_core.cli", *args]
    if not quiet:
        print("$ omni " + shlex.join(args), flush=True)
    result = subprocess.run(command, text=True, capture_output=True)
    if result.stdout.strip() and not quiet:
        print(result.stdout.rstrip())
    if check and result.returncode != 0:
        print(result.stderr.rstrip(), file=sys.stderr)
        raise SystemExit(f"demo failed: `omni {' '.join(args)}` exited {result.returncode}")
    return result


def load_builder(reference: str) -> Callable[..., Path] | None:
    module_name, _, attr = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            return None  # the plugin or its testing module is not there (yet)
        raise
    return getattr(module, attr, None)


def step_list_plugins(ctx: Context) -> None:
    omni("list-plugins")


def step_build_checkpoints(ctx: Context) -> None:
    print("Building tiny RANDOM-WEIGHT checkpoints (outputs will be noise, by design).")
    for family in FAMILIES:
        builder = load_builder(family.builder)
        if builder is None:
            note = f"{family.name}: skipped, {family.builder} is not installed yet"
            print(f"  - {note}")
            ctx.skipped.append(note)
            continue
        started = time.perf_counter()
        path = Path(builder(ctx.work / family.name.split()[0], **family.builder_kwargs))
        ctx.checkpoints[family.name] = path
        print(f"  - {family.name}: {path} ({time.perf_counter() - started:.1f} s)")


def _supported(subcommand: str, options: dict[str, str]) -> list[str]:
    help_text = omni("generate", subcommand, "--help", check=False, quiet=True).stdout
    flags = set(re.findall(r"(--[a-z0-9][a-z0-9-]*)", help_text))
    args: list[str] = []
    for flag, value in options.items():
        if flag in flags and not (flag == "--frames" and "--num-frames" in flags):
            args += [flag, value]
    return args


def step_generate(ctx: Context) -> None:
    if omni("generate", "--help", check=False, quiet=True).returncode != 0:
        note = "omni generate: skipped, the command is not installed yet"
        print(note)
        ctx.skipped.append(note)
        return
    for family in FAMILIES:
        model = ctx.checkpoints.get(family.name)
        if model is None:
            continue
        out = ctx.out / family.output
        args = [a.format(model=model, out=out) for a in family.command]
        args += _supported(family.command[0], family.small)
        started = time.perf_counter()
        omni("generate", *args)
        if not out.is_file() or out.stat().st_size == 0:
            raise SystemExit(f"demo failed: {out} was not written")
        ctx.produced.append(out)
        print(f"  -> {out} ({out.stat().st_size} bytes, {time.perf_counter() - started:.1f} s)")


# ----------------------------------------------------------------------------- omni serve
#: Served model ids by family (the ids the requests use).
SERVE_IDS = {
    "wan (video)": "wan",
    "qwen-image (image)": "qwen",
    "tts (speech)": "tts",
    "qwen2.5-omni (chat)": "omni",
}
#: Request fields sized for tiny checkpoints on a CPU (Qwen's tiny VAE wants multiples of 32).
SERVE_SIZE = "64x64"
SERVE_STEPS = 4
#: Seconds to wait for /health (loading and warming every model on a busy 2-core CPU).
HEALTH_TIMEOUT_S = float(os.environ.get("OMNI_DEMO_HEALTH_TIMEOUT", "600"))
REQUEST_TIMEOUT_S = 300.0
STOP_GRACE_S = 45.0  # the server lets running work finish for up to 30 s on SIGTERM


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def speech_model(ctx: Context) -> tuple[str, str] | None:
    """The speech model to serve as ``(argument, note)``: the default Piper voice when
    ``omni-tts[piper]`` is installed, else the tiny VITS checkpoint."""
    if importlib.util.find_spec("piper") is not None:
        try:
            from omni_tts.piper import default_voice_dir
        except ImportError:
            default_voice_dir = None  # type: ignore[assignment]
        voice_dir = default_voice_dir() if default_voice_dir else None
        if voice_dir is not None:
            from omni_core.contract.errors import OmniError
            from omni_core.contract.host import get_registry
            from omni_core.runtime.loading import find_pipeline, resolve_model_path

            try:  # `omni serve piper` when the server resolves the alias itself
                find_pipeline(get_registry(), resolve_model_path("piper"), None)
                return "tts=piper", "the default Piper voice (model `piper`)"
            except OmniError:
                pass
            # A voice folder with config.json {"architectures": ["PiperVoice"]} is found by the
            # normal architecture lookup (omni_tts.piper); link the installed voice files into one.
            folder = ctx.work / "piper-voice"
            folder.mkdir(parents=True, exist_ok=True)
            for file in voice_dir.glob("*.onnx*"):
                link = folder / file.name
                if not link.exists():
                    link.symlink_to(file)
            (folder / "config.json").write_text(json.dumps({"architectures": ["PiperVoice"]}))
            names = ", ".join(
                sorted(f.name[: -len(".onnx.json")] for f in voice_dir.glob("*.onnx.json"))
            )
            return f"tts={folder}", f"the default Piper voice of omni-tts[piper] ({names})"
    vits = ctx.checkpoints.get("tts (speech)")
    if vits is None:
        return None
    return f"tts={vits}", "the tiny VITS checkpoint (omni-tts[piper] is not installed)"


def _log_tail(log: Path, lines: int = 40) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no server log)"


def wait_healthy(process: subprocess.Popen[bytes], url: str, log: Path) -> float:
    import httpx

    started = time.perf_counter()
    last = "no answer yet"
    while time.perf_counter() - started < HEALTH_TIMEOUT_S:
        if process.poll() is not None:
            raise SystemExit(
                f"demo failed: `omni serve` exited {process.returncode} before /health was 200; "
                f"last lines of {log}:\n{_log_tail(log)}"
            )
        try:
            response = httpx.get(f"{url}/health", timeout=5)
            if response.status_code == 200:
                return time.perf_counter() - started
            last = f"{response.status_code} {response.text[:300]}"
            body = (
                response.json()
                if response.headers.get("content-type", "").startswith("application/json")
                else {}
            )
            failed = body.get("errors") or {}
            if any(status == "failed" for status in (body.get("models") or {}).values()):
                raise SystemExit(
                    f"demo failed: a model failed to load in `omni serve`: {failed}; "
                    f"last lines of {log}:\n{_log_tail(log)}"
                )
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(1.0)
    raise SystemExit(
        f"demo failed: {url}/health was not 200 within {HEALTH_TIMEOUT_S:.0f} s (last: {last}; "
        f"set OMNI_DEMO_HEALTH_TIMEOUT to wait longer); last lines of {log}:\n{_log_tail(log)}"
    )


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (graceful shutdown), then SIGKILL when it does not exit in time."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        print(f"  server did not stop within {STOP_GRACE_S:.0f} s of SIGTERM: killing it")
        process.kill()
        process.wait(timeout=30)
    how = "SIGTERM" if process.returncode == -signal.SIGTERM else f"exit {process.returncode}"
    print(f"  server stopped ({how})")


def _written(ctx: Context, path: Path, started: float, what: str) -> None:
    if not path.is_file() or path.stat().st_size == 0:
        raise SystemExit(f"demo failed: {what} wrote nothing to {path}")
    ctx.produced.append(path)
    print(f"  -> {path} ({path.stat().st_size} bytes, {time.perf_counter() - started:.1f} s)")


def request_all(ctx: Context, client: object, served: dict[str, str], url: str) -> None:
    """One request of each served kind through the official openai client."""
    import httpx

    seed = {"seed": 0, "num_inference_steps": SERVE_STEPS}
    if "qwen" in served:
        started = time.perf_counter()
        print(f"$ client.images.generate(model='qwen', size='{SERVE_SIZE}')", flush=True)
        image = client.images.generate(  # type: ignore[attr-defined]
            model="qwen", prompt="a lighthouse at dusk", size=SERVE_SIZE, extra_body=seed
        )
        path = ctx.out / "server-image.png"
        path.write_bytes(base64.b64decode(image.data[0].b64_json))
        _written(ctx, path, started, "images.generate")
    if "qwen-edit" in served:
        started = time.perf_counter()
        source = ctx.out / "server-image.png"
        if not source.is_file():
            source = ctx.out / "image.png"
        print(f"$ client.images.edit(model='qwen-edit', image={source.name})", flush=True)
        with source.open("rb") as handle:
            edit = client.images.edit(  # type: ignore[attr-defined]
                model="qwen-edit",
                image=(source.name, handle, "image/png"),
                prompt="make it blue",
                size=SERVE_SIZE,
                extra_body=seed,
            )
        path = ctx.out / "server-edit.png"
        path.write_bytes(base64.b64decode(edit.data[0].b64_json))
        _written(ctx, path, started, "images.edit")
    if "wan" in served:
        started = time.perf_counter()
        print(f"$ client.videos.create(model='wan', size='{SERVE_SIZE}') + poll", flush=True)
        job = client.videos.create(  # type: ignore[attr-defined]
            model="wan",
            prompt="a red fox running through snow",
            size=SERVE_SIZE,
            extra_body={**seed, "num_frames": 5},
        )
        while job.status in ("queued", "in_progress"):
            if time.perf_counter() - started > REQUEST_TIMEOUT_S:
                raise SystemExit(f"demo failed: video job {job.id} still {job.status}")
            time.sleep(0.5)
            job = client.videos.retrieve(job.id)  # type: ignore[attr-defined]
        if job.status != "completed":
            raise SystemExit(f"demo failed: video job {job.id} {job.status}: {job.error}")
        path = ctx.out / "server-video.mp4"
        client.videos.download_content(job.id).write_to_file(path)  # type: ignore[attr-defined]
        _written(ctx, path, started, f"video job {job.id}")
    if "tts" in served:
        started = time.perf_counter()
        listed = httpx.get(
            f"{url}/v1/audio/voices",
            params={"model": "tts"},
            timeout=30,
            headers={"Authorization": f"Bearer {client.api_key}"},  # type: ignore[attr-defined]
        )
        listed.raise_for_status()
        voices = [v["id"] for v in listed.json()["data"]]
        voice = voices[0] if voices else "default"
        print(f"$ client.audio.speech.create(model='tts', voice={voice!r})", flush=True)
        speech = client.audio.speech.create(  # type: ignore[attr-defined]
            model="tts", input="Hello from omni serve.", voice=voice, response_format="wav"
        )
        path = ctx.out / "server-speech.wav"
        speech.write_to_file(path)
        _written(ctx, path, started, "audio.speech")
    if "omni" in served:
        started = time.perf_counter()
        print("$ client.chat.completions.create(model='omni', modalities=[text, audio])")
        answer = client.chat.completions.create(  # type: ignore[attr-defined]
            model="omni",
            messages=[{"role": "user", "content": "Hello, who are you?"}],
            modalities=["text", "audio"],
            audio={"voice": "Chelsie", "format": "wav"},
            max_tokens=8,
            seed=0,
        )
        message = answer.choices[0].message
        print(f"  text: {message.content!r}")
        path = ctx.out / "server-chat.wav"
        path.write_bytes(base64.b64decode(message.audio.data))
        _written(ctx, path, started, "chat.completions (text + audio)")


def step_serve(ctx: Context) -> None:
    if omni("serve", "--help", check=False, quiet=True).returncode != 0:
        raise SystemExit("demo failed: no `omni serve` (pip install 'omni-core[serve]')")
    # openai marks its videos API deprecated for OpenAI's own service; omni serves it.
    warnings.filterwarnings("ignore", message=".*Sora API.*", category=DeprecationWarning)
    try:
        import openai
    except ImportError:
        raise SystemExit("demo failed: the server step needs `pip install openai`") from None
    served: dict[str, str] = {}
    for family, model_id in SERVE_IDS.items():
        if family in ctx.checkpoints and model_id != "tts":
            served[model_id] = f"{model_id}={ctx.checkpoints[family]}"
    builder = load_builder("omni_qwen.testing:build_tiny_qwen_image")
    if builder is not None:
        edit = Path(builder(ctx.work / "qwen-edit", variant="edit"))
        served["qwen-edit"] = f"qwen-edit={edit}"
    speech = speech_model(ctx)
    if speech is not None:
        served["tts"], note = speech
        print(f"Speech model: {note}")
    if not served:
        ctx.skipped.append("omni serve: no model family is installed")
        return
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = ctx.out / "server.log"
    warmup = {"width": 64, "height": 64, "num_frames": 5, "num_inference_steps": 2}
    args = [
        "serve",
        *served.values(),
        "--port",
        str(port),
        "--state-dir",
        str(ctx.work / "serve-state"),
        "--warmup-request",
        json.dumps(warmup),
        "--log-level",
        "warning",
    ]
    api_key = secrets.token_urlsafe(16)  # every /v1 route needs it; /health stays open
    print(f"$ OMNI_API_KEY=*** omni {shlex.join(args)}   (log: {log})", flush=True)
    started = time.perf_counter()
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "omni_core.cli", *args],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "OMNI_API_KEY": api_key},
        )
        try:
            ready = wait_healthy(process, url, log)
            print(f"  {url}/health is 200 after {ready:.1f} s: serving {', '.join(served)}")
            client = openai.OpenAI(
                base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=REQUEST_TIMEOUT_S
            )
            try:
                request_all(ctx, client, served, url)
            except openai.OpenAIError as exc:
                raise SystemExit(
                    f"demo failed: a request to `omni serve` failed: {exc}\n"
                    f"last lines of {log}:\n{_log_tail(log)}"
                ) from None
            elapsed = time.perf_counter() - started
            print(f"  {len(served)} models served, one request of each kind: {elapsed:.1f} s")
        finally:
            stop_server(process)


#: The demo, in order.
STEPS: list[tuple[str, Callable[[Context], None]]] = [
    ("installed plugins", step_list_plugins),
    ("tiny checkpoints", step_build_checkpoints),
    ("omni generate", step_generate),
    ("omni serve + one request of each kind (openai client)", step_serve),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "out", help="output folder")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ctx = Context(out=args.out, work=args.out / "tiny-checkpoints")
    if ctx.work.exists():
        shutil.rmtree(ctx.work)
    ctx.work.mkdir(parents=True)
    for title, step in STEPS:
        print(f"\n== {title} ==", flush=True)
        step(ctx)
    print("\n== summary ==")
    for path in ctx.produced:
        print(f"  wrote {path}")
    for note in ctx.skipped:
        print(f"  skipped {note}")
    if not ctx.produced and not ctx.skipped:
        print("  nothing to do")
    return 0


if __name__ == "__main__":
    sys.exit(main())

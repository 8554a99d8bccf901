"""`omni serve` option errors (exit 2, before any port is bound) and `omni bench serve` against
the live server (JSON and PNG written, numbers consistent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from omni_core.cli import cli


def _run(*args: str) -> object:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["serve"], "Missing argument"),
        (["serve", "/no/such/folder"], "no such folder"),
        (["serve", "m", "--port", "99999"], "99999"),
        (["serve", "m", "--max-batch", "0"], "0"),
        (["serve", "a", "--name", "x", "--name", "y"], "--name"),
        (["serve", "a", "a"], "unique"),
        (["serve", "m", "--warmup-request", "[1]"], "JSON object"),
        (["serve", "m", "--option", "novalue"], "KEY=VALUE"),
        (["serve", "m", "--public-url", "ftp://example.com"], "public_url"),
        (["serve", "m", "--speech-format", "ogg"], "'ogg'"),
        (["bench", "serve"], "--task"),
        (["bench", "serve", "--task", "t2i", "--request-rate", "0"], "> 0"),
        (["bench", "serve", "--task", "t2i", "--request-rate", "fast"], "not a number"),
        (["bench", "serve", "--task", "t2i", "--extra", "{"], "JSON"),
        (["bench", "serve", "--task", "t2x"], "t2x"),
    ],
)
def test_serve_cli_bad_options_exit_2(args: list[str], needle: str) -> None:
    result = _run(*args)
    assert result.exit_code == 2, result.output
    assert needle in result.output


def test_serve_cli_bench_is_a_lazy_group() -> None:
    from omni_core.commands.bench import BENCH_COMMANDS

    result = _run("bench", "--help")
    assert result.exit_code == 0
    for name in BENCH_COMMANDS:
        assert name in result.output


def test_serve_cli_bench_serve_unreachable_server() -> None:
    result = _run(
        "bench",
        "serve",
        "--task",
        "t2i",
        "--base-url",
        "http://127.0.0.1:9",
        "--warmup-requests",
        "0",
        "--num-prompts",
        "1",
        "--model",
        "x",
    )
    # Every request failed to connect: reported, and a non-zero exit.
    assert result.exit_code != 0
    assert "failed 1" in result.output or "cannot reach" in result.output


@pytest.mark.parametrize("task", ["t2i", "i2i", "t2v", "tts"])
def test_serve_cli_bench_serve_live(live_server, tmp_path: Path, task: str) -> None:
    model = {"t2i": "qwen", "i2i": "qwen-edit", "t2v": "wan", "tts": "tts"}[task]
    live_server.need(model)
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    args = [
        "bench",
        "serve",
        "--base-url",
        live_server.url,
        "--task",
        task,
        "--num-prompts",
        "6",
        "--max-concurrency",
        "3",
        "--request-rate",
        "50",
        "--warmup-requests",
        "1",
        "--slo-ms",
        "60000",
        "--api-key",
        live_server.api_key,
        "--output",
        str(out),
        "--plot",
        str(png),
    ]
    if task != "tts":
        args += ["--size", "32x32", "--steps", "2", "--model", model]
    if task == "t2v":
        args += ["--num-frames", "5"]
    result = _run(*args)
    assert result.exit_code == 0, result.output
    assert "throughput" in result.output
    summary = json.loads(out.read_text())
    assert summary["command"].startswith("omni bench serve")
    assert summary["model"] == model
    assert summary["completed"] + summary["rejected"] == 6 and summary["failed"] == 0
    latency = summary["latency_ms"]
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]
    assert summary["slo_attainment"] == summary["completed"] / 6
    assert len(summary["requests"]) == 6
    if task == "tts":
        assert 0 < summary["ttfb_ms"]["p50"] <= latency["max"]
        assert summary["real_time_factor"]["mean"] > 0
        assert summary["audio_seconds"] > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_serve_cli_warns_when_public_without_key() -> None:
    result = _run("serve", "/no/such/folder", "--host", "0.0.0.0")
    assert "without an API key" in result.output
    assert result.exit_code == 2  # and the missing model still stops it before binding


def test_serve_cli_answer_flags_reach_the_server_config(checkpoints, monkeypatch) -> None:
    """``--speech-format``, ``--chat-modalities`` and ``--admit-window-ms`` set the config the
    app is made from (nothing is bound: the app factory is replaced)."""
    from omni_core.serving import app as app_module
    from omni_core.serving import config as config_module

    seen: dict[str, object] = {}
    monkeypatch.setattr(app_module, "serve_draining", lambda *a, **k: None)
    monkeypatch.setattr(
        "omni_core.serving.create_app", lambda config: seen.setdefault("config", config)
    )
    assert "wan" in checkpoints.paths, checkpoints.missing
    wan = str(checkpoints.paths["wan"])
    result = _run(
        "serve", wan, "--speech-format", "mp3", "--chat-modalities", "text",
        "--admit-window-ms", "7.5",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    config = seen["config"]
    assert isinstance(config, config_module.ServerConfig)
    assert (config.speech_format, config.chat_modalities) == ("mp3", "text")
    assert config.admit_window_ms == 7.5
    default = config_module.ServerConfig(models=config.models)
    assert (default.speech_format, default.admit_window_ms) == ("wav", 0.0)


def test_serve_cli_refuses_a_loading_option_no_pipeline_reads(checkpoints) -> None:
    """``--option vae_dtyp=...`` (a typo of Wan's ``vae_dtype``) would load with the default
    silently: it is refused before loading, naming the key and the nearest known one."""
    assert "wan" in checkpoints.paths, checkpoints.missing
    wan = str(checkpoints.paths["wan"])
    result = _run("serve", wan, "--option", "vae_dtyp=float32", "--no-warmup")
    assert result.exit_code == 2, result.output
    assert "'vae_dtyp'" in result.output and "did you mean 'vae_dtype'" in result.output
    assert "Traceback" not in result.output


def test_omni_refuses_unknown_loading_options_before_loading(checkpoints) -> None:
    from omni_core import ConfigError, Omni
    from omni_core.api import check_load_options
    from omni_core.contract.host import get_registry

    assert "qwen" in checkpoints.paths, checkpoints.missing
    spec = get_registry().pipelines["qwen-image"]
    check_load_options(spec, {"text_encoder_device": "cpu", "compile": False, "cfg_batch": True})
    with pytest.raises(ConfigError, match=r"'prompt_cache'.*did you mean 'prompt_cache_size'"):
        Omni(checkpoints.paths["qwen"], prompt_cache=8)

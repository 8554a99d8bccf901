"""``omni bench serve --task chat`` end to end on the tiny Qwen2.5-Omni (omni-qwen's builder):
against the session's chat server with the in-process comparison on the same folder, against a
server it starts itself (OpenAI's audio shape), and its flag mistakes (one line, exit 2).

The figures are checked against each other, never against fixed numbers: each answer's audio
seconds are its decoded samples over their rate and equal the in-process answer's (greedy
thinker, seeded talker: the same answer), a "length" answer has exactly ``--max-tokens``
tokens, text-only answers carry no audio, medians and rates follow from the answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from omni_core.cli import cli

MAX_TOKENS = 6


def _bench(*args: str) -> Any:
    return CliRunner().invoke(cli, ["bench", "serve", "--task", "chat", *args])


def _check_answer(record: dict[str, Any], mode: str) -> None:
    assert record["error"] is None, record
    tokens, reason = record["completion_tokens"], record["finish_reason"]
    assert reason in ("stop", "length")
    assert tokens == MAX_TOKENS if reason == "length" else 0 <= tokens < MAX_TOKENS
    if record["first_token_s"] is not None:
        assert 0 < record["first_token_s"] <= record["last_text_s"] <= record["end_s"]
    if mode == "text":
        assert record["audio_samples"] == 0 and record["first_audio_s"] is None
        assert record["audio_s"] == 0.0
        return
    assert record["audio_samples"] > 0 and record["audio_pieces"] >= 1
    assert record["audio_s"] == pytest.approx(record["audio_samples"] / record["sample_rate"])
    assert 0 < record["first_audio_s"] <= record["last_audio_s"] <= record["end_s"]


def _check_row(row: dict[str, Any], records: list[dict[str, Any]], wall_keys: bool) -> None:
    assert row["failed"] == 0 and row["answers"] == len(records)
    tokens = sum(r["completion_tokens"] for r in records)
    assert row["text_tokens_per_s_total"] == pytest.approx(tokens / row["wall_s"])
    if row["mode"] == "audio":
        assert row["audio_s_total"] == pytest.approx(sum(r["audio_s"] for r in records))
        assert row["first_audio_s"] <= row["first_audio_p90_s"]
        if len(records) == 1:
            (one,) = records
            assert row["rtf"] == pytest.approx(one["last_audio_s"] / one["audio_s"])
            assert row["first_audio_s"] == one["first_audio_s"]
    else:
        assert "first_audio_s" not in row and "rtf" not in row
    if wall_keys and len(records) == 1 and records[0]["last_text_s"]:
        (one,) = records
        assert row["text_tokens_per_s"] == pytest.approx(
            one["completion_tokens"] / one["last_text_s"]
        )


def test_bench_chat_against_the_chat_server_and_in_process(chat_server, tmp_path: Path) -> None:
    chat_server.need("qwen25")
    out = tmp_path / "chat.json"
    result = _bench(
        "--base-url", chat_server.url, "--api-key", chat_server.api_key, "--model", "qwen25",
        "--checkpoint", str(chat_server.checkpoints.paths["qwen25"]),
        "--concurrency", "1,2", "--text-concurrency", "1", "--rounds", "1",
        "--max-tokens", str(MAX_TOKENS), "--output", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "first audio" in result.output and "http_minus_in_process_first_audio_s" in result.output
    data = json.loads(out.read_text())
    assert data["task"] == "chat" and data["model"] == "qwen25"
    assert data["versions"]["openai"] and data["versions"]["omni-core"]
    rows = {(r["path"], r["mode"], r["concurrency"]): r for r in data["rows"]}
    wanted = {(p, m, c) for p in ("http", "in_process") for m, c in [("audio", 1), ("audio", 2)]}
    assert set(rows) == wanted | {("http", "text", 1), ("in_process", "text", 1)}
    answers = {(a["path"], a["mode"], a["concurrency"]): a["records"] for a in data["answers"]}
    for key, row in rows.items():
        assert row["model"] == "qwen25" and len(answers[key]) == key[2]
        for record in answers[key]:
            _check_answer(record, key[1])
        _check_row(row, answers[key], wall_keys=True)
    for mode, level in [("audio", 1), ("audio", 2), ("text", 1)]:  # the same answers both ways
        http, local = answers[("http", mode, level)], answers[("in_process", mode, level)]
        for h, loc in zip(http, local, strict=True):
            assert (h["seed"], h["completion_tokens"]) == (loc["seed"], loc["completion_tokens"])
            assert h["audio_samples"] == loc["audio_samples"]
    diff = data["comparisons"]["http_minus_in_process_first_audio_s"]
    for level in ("1", "2"):
        http, local = rows[("http", "audio", int(level))], rows[("in_process", "audio", int(level))]
        assert diff[level] == pytest.approx(http["first_audio_s"] - local["first_audio_s"])
    ratio = data["comparisons"]["first_audio_2_over_1"]
    assert set(ratio) == {"http", "in_process"} and all(v > 0 for v in ratio.values())
    peaks = data["peak_device_memory_bytes"]
    assert set(peaks) == {"http", "in_process"}
    for path, peak in peaks.items():  # the largest of the rows' (None: CPU does not tell)
        levels = [r["peak_device_memory_bytes"] for r in data["rows"] if r["path"] == path]
        assert peak == max((v for v in levels if v is not None), default=None)
        assert peak is None or peak > 0
    assert "api_key" not in data["settings"]


def test_bench_chat_starts_its_own_server(chat_server, tmp_path: Path) -> None:
    """``--start-server``: ``omni serve`` on the folder (a free port, its own key), OpenAI's
    audio shape (``audio: {format: pcm16}``, PCM pieces), no in-process pass."""
    chat_server.need("qwen25")
    out = tmp_path / "started.json"
    result = _bench(
        "--checkpoint", str(chat_server.checkpoints.paths["qwen25"]), "--start-server",
        "--no-in-process", "--audio-shape", "openai", "--concurrency", "1",
        "--text-concurrency", "none", "--rounds", "1", "--max-tokens", str(MAX_TOKENS),
        "--warmup-requests", "0", "--output", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert data["base_url"] == "self-started" and data["model"] == "qwen25"
    (row,) = data["rows"]
    (answers,) = data["answers"]
    assert (row["path"], row["mode"], row["concurrency"]) == ("http", "audio", 1)
    (record,) = answers["records"]
    _check_answer(record, "audio")
    _check_row(row, answers["records"], wall_keys=True)
    assert data["comparisons"]["http_minus_in_process_first_audio_s"] == {}


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--concurrency", "0"], "--concurrency"),
        (["--concurrency", "1,x"], "'x'"),
        (["--text-concurrency", "-3"], "--text-concurrency"),
        (["--rounds", "zero"], "--rounds"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--start-server"], "needs --checkpoint"),
        (["--in-process"], "needs --checkpoint"),
        (["--checkpoint", "/no/such/folder"], "not a model folder"),
        (["--audio-shape", "mp3"], "vllm or openai"),
        (["--option", "novalue"], "KEY=VALUE"),
        (["--concurrency", "none", "--text-concurrency", "none"], "nothing to measure"),
        (["--plot", "x.png"], "--plot"),
    ],
)
def test_bench_chat_bad_flags_are_one_line(args: list[str], needle: str) -> None:
    result = _bench(*args)
    output = result.output.strip()
    assert result.exit_code == 2, output
    assert len(output.splitlines()) == 1 and "Traceback" not in output, output
    assert needle in output, output


def test_bench_chat_flags_belong_to_the_chat_task() -> None:
    result = CliRunner().invoke(cli, ["bench", "serve", "--task", "t2i", "--concurrency", "1"])
    assert result.exit_code == 2
    expected = "Error: --concurrency: only for --task chat (this run is --task t2i)"
    assert result.output.strip() == expected


def test_bench_chat_unreachable_server_is_one_line() -> None:
    result = _bench("--base-url", "http://127.0.0.1:9", "--concurrency", "1")
    output = result.output.strip()
    assert result.exit_code == 2 and len(output.splitlines()) == 1, output
    assert "cannot reach http://127.0.0.1:9" in output

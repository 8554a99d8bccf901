"""Sets up the two halves of the Qwen3-TTS oracle env (tox -e oracle-qwen-tts), once.

``python oracle_qwen3_tts_setup.py ENVDIR``, run by tox before the tests with the env's Python:

- the official qwen-tts 0.1.1 without its dependencies (it also pins accelerate and pulls gradio,
  neither imported on the path the oracle uses; the rest are the env's deps in tox.ini);
- torchaudio, which ``import qwen_tts`` needs only for ``torchaudio.compliance.kaldi`` (pure torch
  code, used by the 25 Hz tokenizer the oracle never runs). PyPI's wheel is a CUDA build of
  torch 2.11 and no CPU index is reachable here, so it goes in without its torch pin and without
  its compiled extension, which torchaudio treats as an extension-less build (pure Python); torch
  stays the CPU 2.13.0;
- transformers 5 (with its own dependencies) in ENVDIR/omni-side, which the omni half puts first
  on its path.

Each step is skipped when already done, so later runs need no network.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

TRANSFORMERS_5 = "transformers==5.24.0"


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=True)


def main(envdir: Path) -> None:
    if importlib.util.find_spec("qwen_tts") is None:
        pip("--no-deps", "qwen-tts==0.1.1")
    spec = importlib.util.find_spec("torchaudio")
    if spec is None:
        pip("--no-deps", "torchaudio==2.11.1")
        spec = importlib.util.find_spec("torchaudio")
    assert spec is not None and spec.origin is not None
    for lib in (Path(spec.origin).parent / "lib").glob("*.so"):
        lib.unlink()
    side = envdir / "omni-side"
    if not (side / "transformers").is_dir():
        pip("--target", str(side), TRANSFORMERS_5)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

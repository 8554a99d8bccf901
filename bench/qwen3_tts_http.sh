#!/usr/bin/env bash
# Issue 27's benchmark on the GPU machine: Qwen3-TTS through a real `omni serve` (HTTP and the
# WebSocket text stream) and the same engine in-process, from the repo root:
#   bash bench/qwen3_tts_http.sh --models qwen3-tts-1.7b-customvoice     # ~5 min per model
#   bash bench/qwen3_tts_http.sh --models qwen3-tts-1.7b-base --profile-http 8
# The machine has torch/transformers but no fastapi/uvicorn/pydantic/openai/httpx/websockets:
# they come from ./.whl (carry ".whl"; fill it with ../shared/tools/device-wheels.sh openai
# httpx httpcore h11 anyio sniffio idna certifi distro jiter websockets python-multipart
# prometheus-client httpx2 httpcore2 truststore: openai 3.x imports httpx2). Checkpoints are cached in $CKPT (kept while the machine stays warm).
# Writes $OUT/qwen3-tts-http-<models>.json; combine several with --combine.
set -euo pipefail
source bench/speech_site.sh ./plugins/omni-qwen
CKPT=${CKPT:-/tmp/qwen3-tts-ckpt}
OUT=${OUT:-bench/results}
name=$(printf '%s' "$*" | grep -o 'qwen3-tts-[a-z0-9.-]*' | tr '\n' '+' | sed 's/+$//' || true)
python3 bench/qwen3_tts_http_bench.py --checkpoint "$CKPT" --path http,websocket \
  --out "$OUT/qwen3-tts-http-${name:-all}.json" "$@"

#!/usr/bin/env bash
# Issue 30's VibeVoice row on the GPU machine: VibeVoice at the real size with random weights
# (omni_vibevoice.bench.build_random_vibevoice: every step speaks, so a request makes exactly
# --frames frames) through a real `omni serve` (HTTP; the WebSocket text stream with
# --path http,websocket) and the same engine in-process, from the repo root:
#   bash bench/vibevoice_http.sh                                  # 1.5B at 1, 8, 32 requests
#   bash bench/vibevoice_http.sh --models vibevoice-7b --concurrency 1,8
# bench/qwen3_tts_http_bench.py does the work (the models: bench/speech_http_models.py). The
# machine has torch/transformers but no fastapi/uvicorn/pydantic/openai/httpx/websockets or
# diffusers (VibeVoice's noise scheduler): they come from ./.whl (carry ".whl"; fill it with
# ../shared/tools/device-wheels.sh diffusers openai httpx httpcore h11 anyio sniffio idna
# certifi distro jiter websockets python-multipart prometheus-client httpx2 httpcore2
# truststore). Checkpoints are cached in $CKPT (kept while the machine stays warm).
# Writes $OUT/vibevoice-http-<models>.json. 75 frames = 10 s of audio per request.
set -euo pipefail
source bench/speech_site.sh ./plugins/omni-vibevoice
CKPT=${CKPT:-/tmp/vibevoice-ckpt}
OUT=${OUT:-bench/results}
name=$(printf '%s' "$*" | grep -o 'vibevoice-[a-z0-9.]*' | tr '\n' '+' | sed 's/+$//' || true)
python3 bench/qwen3_tts_http_bench.py --checkpoint "$CKPT" --models vibevoice-1.5b \
  --concurrency 1,8,32 --frames 75 --path http \
  --out "$OUT/vibevoice-http-${name:-vibevoice-1.5b}.json" "$@"

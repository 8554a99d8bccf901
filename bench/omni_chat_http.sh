#!/usr/bin/env bash
# Issue 26's benchmark on the GPU machine: Qwen2.5-Omni-7B (or Qwen3-Omni-30B-A3B with --model)
# at the real sizes, random weights, through a real `omni serve` on 127.0.0.1 with the official
# openai client (streamed text + audio, then text only) and the same answers in-process, from
# the repo root:
#   bash bench/omni_chat_http.sh                                        # Qwen2.5-Omni-7B sizes
#   bash bench/omni_chat_http.sh --option decode_graphs=on              # a load option, both paths
#   bash bench/omni_chat_http.sh --model qwen3-omni-30b-a3b --spill /dev/shm/omni-spill --http-only
#                        # ~70 GB checkpoint: the shards that do not fit the disk go to tmpfs
# The machine has torch/transformers but no fastapi/uvicorn/pydantic/openai/httpx/websockets:
# they come from ./.whl (carry ".whl"; fill it with ../shared/tools/device-wheels.sh openai
# httpx httpcore h11 anyio sniffio idna certifi distro jiter websockets python-multipart
# prometheus-client httpx2 httpcore2 truststore, as for bench/qwen3_tts_http.sh;
# openai 3.x imports httpx2). The checkpoint is written once under $CKPT (kept while
# the machine stays warm). Writes $OUT/omni-realtime-h200.json (a run of the other model already
# there is kept) and the raw `omni bench serve` result beside it.
set -euo pipefail
SITE=/tmp/site-chat source bench/speech_site.sh ./plugins/omni-qwen
CKPT=${CKPT:-/tmp/omni-chat-ckpt}
OUT=${OUT:-bench/results}
python3 bench/omni_chat_http_bench.py --checkpoint "$CKPT" --out "$OUT/omni-realtime-h200.json" "$@"

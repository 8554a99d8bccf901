#!/usr/bin/env bash
# Issue 28's GPU row on the GPU machine, from the repo root: Qwen2.5-Omni-7B at the real sizes
# (random weights, issue 26's checkpoint under $CKPT) through a real `omni serve` and
# `omni bench serve --task realtime` at 1 and 8 sessions:
#   bash bench/omni_realtime_http.sh
# The wheels come from ./.whl as for bench/omni_chat_http.sh (carry ".whl", the same list plus
# transformers>=5.21). Writes $OUT/omni-realtime-session-h200.json and a summary per level.
set -euo pipefail
source bench/speech_site.sh ./plugins/omni-qwen
CKPT=${CKPT:-/tmp/omni-chat-ckpt}
OUT=${OUT:-bench/results}
python3 bench/omni_realtime_http_bench.py --checkpoint "$CKPT" \
  --out "$OUT/omni-realtime-session-h200.json" "$@"

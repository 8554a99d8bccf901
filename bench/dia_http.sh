#!/usr/bin/env bash
# Issue 30's Dia row on the GPU machine: Dia-1.6B at the real size with random weights
# (omni_dia.bench.build_random_dia: random weights never end a clip, so a request makes exactly
# --frames frames) through a real `omni serve` (HTTP) and the same engine in-process, from the
# repo root:
#   bash bench/dia_http.sh                                  # 1.6B at 1, 8, 32 requests
#   bash bench/dia_http.sh --concurrency 1,8
# bench/qwen3_tts_http_bench.py does the work (the models: bench/speech_http_models.py). The
# machine has torch/transformers but no fastapi/uvicorn/pydantic/openai/httpx/websockets: they
# come from ./.whl (carry ".whl"; fill it with ../shared/tools/device-wheels.sh openai httpx
# httpcore h11 anyio sniffio idna certifi distro jiter websockets python-multipart
# prometheus-client httpx2 httpcore2 truststore). Checkpoints are cached in $CKPT (kept while
# the machine stays warm). 861 frames = 10 s of audio per request. The decode path is A/B'd in
# one run: each of $DIA_GRAPHS (default "on off": omni-dia's cuda_graphs load option, CUDA graphs
# then the eager step) writes $OUT/dia-http-MODE.json, and $OUT/dia-http.json merges their rows
# (each row names its load_options and in_process_decode_path).
set -euo pipefail
source bench/speech_site.sh ./plugins/omni-dia
CKPT=${CKPT:-/tmp/dia-ckpt}
OUT=${OUT:-bench/results}
reports=()
for mode in ${DIA_GRAPHS:-on off}; do
  python3 bench/qwen3_tts_http_bench.py --checkpoint "$CKPT" --models dia-1.6b \
    --concurrency 1,8,32 --frames 861 --path http --option "cuda_graphs=$mode" \
    --out "$OUT/dia-http-$mode.json" "$@"
  reports+=("$OUT/dia-http-$mode.json")
done
python3 bench/qwen3_tts_http_bench.py --combine "${reports[@]}" --out "$OUT/dia-http.json"

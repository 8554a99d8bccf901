# Sourced by bench/qwen3_tts_http.sh and bench/vibevoice_http.sh on the GPU machine (repo root):
# installs the carried wheels (.whl) and omni-core plus the plugin folders given as arguments
# (not editable, so `omni serve` is the real entry point) into $SITE (default /tmp/site-tts), on
# PYTHONPATH. bench/omni_chat_http.sh sources it too.
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 OMNI_PLATFORM=${OMNI_PLATFORM-}
SITE=${SITE:-/tmp/site-tts}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target "$SITE" .whl/*.whl
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --upgrade \
  --target "$SITE" ./core "$@"

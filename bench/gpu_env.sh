#!/usr/bin/env bash
# Source this on the GPU machine (python 3.12, torch with CUDA, no registry access) from the repo
# root: it installs the carried wheels (.whl: diffusers, pydantic, fastapi, ...) and omni's own
# packages (not editable, so their `omni` entry points are real) into /tmp/site. The wheels:
#   ../shared/tools/device-wheels.sh transformers==5.24.0 huggingface_hub==2.4.0 tokenizers==0.23.3 \
#     hf-xet==1.8.0 httpx2 httpcore2 truststore h11 anyio sniffio idna certifi httpx httpcore \
#     torchsde==0.2.6 trampoline==0.1.2   # hub 2.x needs httpx2; Stable Audio's solver torchsde
# (source this file itself, not through a pipe: a pipe runs it in a subshell). fp8-cudnn also
# needs the cudnn frontend among the carried wheels, fetched beforehand where the index is
# reachable: pip download nvidia-cudnn-frontend==1.32.0 --no-deps --only-binary=:all: \
#   --python-version 3.12 --platform manylinux_2_28_x86_64 -d .whl
set -e
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site \
  ./core ./plugins/omni-wan ./plugins/omni-qwen ./plugins/omni-attention-fp8 ./plugins/omni-flux \
  ./plugins/omni-zimage ./plugins/omni-hunyuan-video ./plugins/omni-ltx ./plugins/omni-stable-audio
python3 - <<'PY'
import torch, diffusers, transformers
print("torch", torch.__version__, "diffusers", diffusers.__version__,
      "transformers", transformers.__version__, "gpus", torch.cuda.device_count(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
PY
set +e

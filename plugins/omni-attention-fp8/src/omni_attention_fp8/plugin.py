"""omni entry point of omni-attention-fp8: the ``fp8-cudnn`` and ``fp8-emulated`` backends.

Both are lossy (``auto`` never picks them) and of precision ``fp8`` (the fp8 mode,
``Omni(fp8=True)`` / ``--fp8``, puts the best usable one on the pipeline's heavy roles). Imported
by ``omni list-plugins``: no torch here, every reference is a lazy ``"module:attr"`` string.
"""

from __future__ import annotations

from collections.abc import Callable

from omni_core import PLUGIN_API_VERSION, AttentionBackendSpec, hookimpl

OMNI_PLUGIN_API = PLUGIN_API_VERSION

_PKG = "omni_attention_fp8"


@hookimpl
def omni_register_attention_backends(register: Callable[[AttentionBackendSpec], None]) -> None:
    register(
        AttentionBackendSpec(
            name="fp8-cudnn",
            implementation=f"{_PKG}.cudnn_kernel:fp8_cudnn",
            availability=f"{_PKG}.cudnn_graph:fp8_cudnn_available",
            device_types=("cuda",),
            supports_mask=False,
            priority=40,
            lossy=True,
            precision="fp8",
            description="cuDNN fp8 flash attention (Hopper+, nvidia-cudnn-frontend): q/k/v in "
            "e4m3 with per-(batch, head) scales; key-padding masks only. Lossy.",
        )
    )
    register(
        AttentionBackendSpec(
            name="fp8-emulated",
            implementation=f"{_PKG}.emulated:fp8_emulated",
            availability=f"{_PKG}.emulated:fp8_emulated_available",
            device_types=("cpu",),
            supports_mask=False,
            priority=-20,
            lossy=True,
            precision="fp8",
            description="fp8-cudnn's arithmetic in torch on CPU (slow): measures fp8 "
            "attention's quality where the kernel cannot run. Lossy.",
        )
    )

"""Cheap, side-effect-free detection of an Ascend NPU.

What is cheap here, and why it matters:

- ``importlib.util.find_spec("torch_npu")`` finds the package on ``sys.path`` without importing
  it. Importing ``torch_npu`` loads the CANN runtime (seconds), opens the driver and reads
  environment switches such as ``PYTORCH_NPU_ALLOC_CONF`` and ``TASK_QUEUE_ENABLE`` once: doing
  that during detection would make the platform's environment defaults too late to matter.
- The installed versions of ``torch`` and ``torch_npu`` come from package metadata (a file read).
  torch_npu is built for one torch major.minor; a mismatch fails at import, so it is reported here.
- Devices are the driver's device nodes ``/dev/davinci<N>`` (the Ascend driver creates one per
  chip; containers get them with ``--device /dev/davinciN``), filtered by
  ``ASCEND_RT_VISIBLE_DEVICES`` as the runtime does. Listing a directory touches no device.
- The CANN toolkit must be set up (``source .../ascend-toolkit/set_env.sh``), which exports
  ``ASCEND_HOME_PATH`` / ``ASCEND_TOOLKIT_HOME``; without it ``import torch_npu`` fails.

The exact ``torch.npu.device_count()`` is asked only once the platform is selected.
"""

from __future__ import annotations

import importlib.util
import os
import re
from importlib import metadata
from pathlib import Path

from omni_core import Availability

#: Where the Ascend driver creates device nodes (a module attribute so tests can point it at a
#: temporary directory).
DEV_DIR = Path("/dev")
#: The toolkit's default install location, used when no ASCEND_* variable is set.
DEFAULT_TOOLKIT = Path("/usr/local/Ascend/ascend-toolkit/latest")
_TOOLKIT_VARS = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH")
_DEVICE_NODE = re.compile(r"^davinci(\d+)$")


def device_nodes() -> list[int]:
    """Physical ids of the ``/dev/davinci<N>`` nodes present (``davinci_manager`` excluded)."""
    try:
        names = os.listdir(DEV_DIR)
    except OSError:
        return []
    return sorted(int(m.group(1)) for name in names if (m := _DEVICE_NODE.match(name)))


def visible_devices() -> list[int]:
    """Device nodes filtered by ``ASCEND_RT_VISIBLE_DEVICES`` (unset: all; empty: none)."""
    present = device_nodes()
    raw = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if raw is None:
        return present
    wanted = [int(part) for part in raw.split(",") if part.strip().isdigit()]
    return [i for i in wanted if i in present]


def _major_minor(version: str) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)", version)
    return (int(match.group(1)), int(match.group(2))) if match else None


def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def toolkit_found() -> bool:
    """Whether the CANN toolkit looks set up (environment exported, or the default install)."""
    return any(os.environ.get(var) for var in _TOOLKIT_VARS) or DEFAULT_TOOLKIT.exists()


def detect_npu() -> Availability:
    """The detector: yes when torch_npu fits torch, CANN is set up and a chip is visible."""
    if importlib.util.find_spec("torch") is None:
        return Availability.no("torch is not installed")
    if importlib.util.find_spec("torch_npu") is None:
        return Availability.no(
            "torch_npu is not installed (pip install torch-npu==<your torch version>; it needs "
            "the Ascend CANN toolkit)"
        )
    torch_version = _dist_version("torch")
    npu_version = _dist_version("torch_npu")
    if torch_version and npu_version:
        want, have = _major_minor(npu_version), _major_minor(torch_version)
        if want and have and want != have:
            return Availability.no(
                f"torch_npu {npu_version} is built for torch {want[0]}.{want[1]}, but torch "
                f"{torch_version} is installed; install the matching pair"
            )
    if not toolkit_found():
        return Availability.no(
            "the Ascend CANN toolkit is not set up (no ASCEND_HOME_PATH; run "
            "'source /usr/local/Ascend/ascend-toolkit/set_env.sh')"
        )
    present = device_nodes()
    if not present:
        return Availability.no(
            f"no Ascend device node ({DEV_DIR}/davinci<N>): the driver is not loaded or the "
            "devices are not passed into this container"
        )
    visible = visible_devices()
    if not visible:
        return Availability.no(
            f"ASCEND_RT_VISIBLE_DEVICES={os.environ.get('ASCEND_RT_VISIBLE_DEVICES', '')!r} "
            f"hides every Ascend device (present: {', '.join(map(str, present))})"
        )
    return Availability.yes(
        f"{len(visible)} Ascend NPU(s) visible (torch_npu {npu_version or 'unknown version'})"
    )

"""The compatibility row of omni-platform-npu, as data (``omni doctor`` shows and checks it).

``COMPATIBILITY`` maps distribution names to PEP 440 specifiers, the form ``omni doctor`` checks
against installed versions. What pip cannot see (the CANN toolkit, the chips) is stated in
``SYSTEM_REQUIREMENTS`` and shown by the platform's ``describe()``. This module imports nothing
heavy, so ``omni list-plugins`` can read it.
"""

from __future__ import annotations

#: torch_npu is built for one torch major.minor (torch_npu 2.5.1 pairs with torch 2.5.1); the
#: detector checks that pairing from package metadata, without importing either.
COMPATIBILITY: dict[str, str] = {
    "omni-core": ">=0.3,<0.4",
    "torch": ">=2.5",
    "torch-npu": ">=2.5.1",
}

#: Requirements outside pip's view, and how this plugin was tested.
SYSTEM_REQUIREMENTS: dict[str, str] = {
    "CANN": ">=8.0 (source .../ascend-toolkit/set_env.sh)",
    "torch-npu/torch pairing": "same major.minor",
    "hardware": "Atlas A2 / A3 (Ascend 910B, 910C)",
    "tested": "contract tests with a stand-in torch_npu on torch 2.13.0 (no Ascend hardware in CI)",
}

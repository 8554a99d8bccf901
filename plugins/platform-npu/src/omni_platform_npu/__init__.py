"""Ascend NPU platform for omni (torch_npu, HCCL, fused attention)."""

__version__ = "0.3.0"

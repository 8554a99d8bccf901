"""Attention kernels the mechanism and the built-in plugins share (no plugin code here)."""

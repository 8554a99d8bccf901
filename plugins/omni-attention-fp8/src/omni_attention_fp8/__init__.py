"""fp8 attention for omni: cuDNN's fp8 flash attention on Hopper, and its math in torch."""

__version__ = "0.1.0"

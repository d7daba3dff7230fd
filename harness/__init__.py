"""nvrx-qual: recovery qualification for Megatron-LM GPT under NVRx ft_launcher."""

__version__ = "0.1.0"

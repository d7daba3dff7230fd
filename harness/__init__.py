"""nvrx-qual: recovery qualification for Megatron-LM GPT under NVRx ft_launcher."""

__version__ = "0.1.0"

# The directory that holds the harness package: a checkout's root, or site-packages.
HOME = __import__("pathlib").Path(__file__).resolve().parent.parent

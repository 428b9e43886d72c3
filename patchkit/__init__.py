"""patchkit: pinned llama.cpp -> patch series -> tested CUDA/RPC binaries."""

__all__ = ["__version__"]

__version__ = "0.1.0"

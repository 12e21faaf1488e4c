"""torch.version of the fake torch: FAKE_TORCH_CUDA sets cuda ("none": a CPU-only build)."""
import os

_cuda = os.environ.get("FAKE_TORCH_CUDA", "12.4")
cuda = None if _cuda == "none" else _cuda

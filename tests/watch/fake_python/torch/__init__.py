"""A fake torch for the tests of `itera doctor` (tests/watch/test_doctor.cpp): the few calls the
probes make, computed in plain Python on small matrices, with behaviours scripted by the
environment:

  FAKE_TORCH_IMPORT=error        importing torch raises ImportError (a broken install)
  FAKE_TORCH_CUDA=12.4|none      torch.version.cuda ("none": a CPU-only build)
  FAKE_TORCH_AVAILABLE=0         torch.cuda.is_available() is False
  FAKE_TORCH_CAPABILITY=9.0      torch.cuda.get_device_capability(0)
  FAKE_TORCH_ARCHS=sm_80,sm_90   torch.cuda.get_arch_list()
  FAKE_TORCH_BF16=broken         bf16 matrix products come out 1.5 times too large
  FAKE_TORCH_SCALED_MM=missing|crash|hang
                                 no torch._scaled_mm; or it kills the process with SIGSEGV; or it hangs

Values are rounded to the precision of their dtype (bf16: 8 significant bits, fp8 e4m3: 4), so the
probes' error checks see realistic numbers.
"""
import math
import os
import random
import signal
import time

if os.environ.get("FAKE_TORCH_IMPORT") == "error":
    raise ImportError("libcudart.so.13: cannot open shared object file: No such file or directory")

__version__ = "2.99.0+fake"


class dtype:
    def __init__(self, name, bits):
        self.name, self.bits = name, bits

    def __repr__(self):
        return "torch." + self.name


float32 = dtype("float32", 24)
bfloat16 = dtype("bfloat16", 8)
float8_e4m3fn = dtype("float8_e4m3fn", 4)


def _round(x, d):
    if d is float32 or x == 0 or not math.isfinite(x):
        return float(x)
    m, e = math.frexp(x)
    scale = 2.0 ** d.bits
    r = math.ldexp(round(m * scale) / scale, e)
    if d is float8_e4m3fn:
        r = max(-448.0, min(448.0, r))
    return r


class Tensor:
    def __init__(self, rows, dt=float32):
        self.rows = rows  # a list of lists (2-D), a list (1-D) or a number (0-D)
        self.dtype = dt

    @property
    def shape(self):
        if isinstance(self.rows, list):
            if self.rows and isinstance(self.rows[0], list):
                return (len(self.rows), len(self.rows[0]))
            return (len(self.rows),)
        return ()

    def _map(self, f, dt=None):
        dt = dt or self.dtype
        if isinstance(self.rows, list):
            if self.rows and isinstance(self.rows[0], list):
                return Tensor([[_round(f(v), dt) for v in row] for row in self.rows], dt)
            return Tensor([_round(f(v), dt) for v in self.rows], dt)
        return Tensor(_round(f(self.rows), dt), dt)

    def _zip(self, other, f):
        if isinstance(other, Tensor):
            if isinstance(self.rows, list) and self.rows and isinstance(self.rows[0], list):
                return Tensor([[f(a, b) for a, b in zip(ra, rb)] for ra, rb in zip(self.rows, other.rows)], float32)
            if isinstance(self.rows, list):
                return Tensor([f(a, b) for a, b in zip(self.rows, other.rows)], float32)
            return Tensor(f(self.rows, other.rows), float32)
        return self._map(lambda v: f(v, other), float32)

    def _flat(self):
        if isinstance(self.rows, list):
            if self.rows and isinstance(self.rows[0], list):
                return [v for row in self.rows for v in row]
            return list(self.rows)
        return [self.rows]

    def to(self, dt):
        return self._map(lambda v: v, dt)

    def float(self):
        return self._map(lambda v: v, float32)

    def t(self):
        return Tensor([list(col) for col in zip(*self.rows)], self.dtype)

    def contiguous(self):
        return self

    def __matmul__(self, other):
        if self.dtype is not other.dtype:
            raise RuntimeError(f"expected both operands to have the same dtype, got {self.dtype} and {other.dtype}")
        cols = list(zip(*other.rows))
        out = [[sum(a * b for a, b in zip(row, col)) for col in cols] for row in self.rows]
        if self.dtype is bfloat16 and os.environ.get("FAKE_TORCH_BF16") == "broken":
            out = [[1.5 * v for v in row] for row in out]
        return Tensor(out, float32).to(self.dtype if self.dtype is not float8_e4m3fn else float32)

    def __sub__(self, other):
        return self._zip(other, lambda a, b: a - b)

    def __add__(self, other):
        return self._zip(other, lambda a, b: a + b)

    def __mul__(self, other):
        return self._zip(other, lambda a, b: a * b)

    def __truediv__(self, other):
        return self._zip(other, lambda a, b: a / b)

    def norm(self):
        return Tensor(math.sqrt(sum(v * v for v in self._flat())))

    def sum(self):
        return Tensor(float(sum(self._flat())))

    def abs(self):
        return self._map(abs)

    def max(self):
        return Tensor(max(self._flat()))

    def item(self):
        if isinstance(self.rows, list):
            raise RuntimeError("a Tensor with more than one element cannot be converted to a Python scalar")
        return self.rows


_rng = random.Random(0)


def manual_seed(seed):
    _rng.seed(seed)


def randn(*shape, device=None, dtype=None):
    dt = dtype or float32
    if len(shape) == 1:
        return Tensor([_round(_rng.gauss(0, 1), dt) for _ in range(shape[0])], dt)
    if len(shape) == 2:
        return Tensor([[_round(_rng.gauss(0, 1), dt) for _ in range(shape[1])] for _ in range(shape[0])], dt)
    raise RuntimeError(f"the fake torch makes 1-D and 2-D tensors only, not {shape}")


def arange(n, device=None, dtype=None):
    return Tensor([float(i) for i in range(n)], dtype or float32)


def ones(n, device=None, dtype=None):
    return Tensor([1.0] * n, dtype or float32)


def tensor(v, device=None, dtype=None):
    return Tensor(float(v), dtype or float32)


def empty_like(x):
    return x._map(lambda v: 0.0)


if os.environ.get("FAKE_TORCH_SCALED_MM") != "missing":
    def _scaled_mm(a, b, scale_a=None, scale_b=None, bias=None, scale_result=None, out_dtype=None, use_fast_accum=False):
        mode = os.environ.get("FAKE_TORCH_SCALED_MM")
        if mode == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "hang":
            time.sleep(3600)
        if a.dtype is not float8_e4m3fn or b.dtype is not float8_e4m3fn:
            raise RuntimeError("Expected both inputs to be fp8 types")
        product = a.float() @ b.float()
        return (product * (scale_a.item() * scale_b.item())).to(out_dtype or bfloat16)


from . import cuda, version  # noqa: E402  (after the names they use)

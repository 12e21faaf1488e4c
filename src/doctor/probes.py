#if 0
r''' '
#endif
/*'''#*/R"itera_py(
# itera doctor's probes (docs/doctor.md). One run checks one item and prints one line,
#   ITERA_DOCTOR_RESULT {"item": ..., "verdict": "works"|"fails"|"absent"|"skipped", ...}
# as its last line on stdout. `itera doctor` runs each item in its own process with a timeout, so a
# crash or a hang costs that item only. Every item is tried, not only imported: a kernel runs and
# its output is checked against a reference computed another way.
#
# This file is a real Python file and, at the same time, the body of a C++ raw string literal:
# src/doctor/probes_source.cpp includes it, so it is compiled into the binary and rebuilt when it
# changes. The first four lines and the last one make that work; keep them, and never write the
# closing delimiter (a right parenthesis followed by itera_py and a double quote) anywhere else.
#
# Run by hand:  python3 src/doctor/probes.py bf16
import json
import math
import os
import sys
import traceback

MARK = "ITERA_DOCTOR_RESULT "
SIZE = 64  # matrices SIZE x SIZE: enough to exercise the kernels, small enough to run anywhere


class Absent(Exception):
    """The item's package is not installed."""


class Skip(Exception):
    """The item cannot be tried here, for the reason given."""


class Fail(Exception):
    """The item was tried and does not work."""


class Result:
    def __init__(self, item):
        self.item = item
        self.verdict = "works"
        self.version = ""
        self.detail = ""
        self.facts = {}
        self.check = None

    def checked(self, error, tolerance, method):
        """Records a numerical check and fails the item when it does not pass."""
        self.check = {"error": error if math.isfinite(error) else None, "tolerance": tolerance, "method": method,
                      "passed": math.isfinite(error) and error <= tolerance}
        if not self.check["passed"]:
            raise Fail(f"{method}: relative error {error:.3g} > tolerance {tolerance:g}")


def error_line(e):
    """The exception's type and the first line of its message: the line that names the problem."""
    text = str(e).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def present(module):
    """Absent unless the top-level package of `module` can be found (nothing is imported)."""
    import importlib.util
    top = module.split(".")[0]
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise Absent(f"no module named {top}")


def load(module):
    import importlib
    present(module)
    return importlib.import_module(module)


def torch_cuda():
    """torch with a usable CUDA device; otherwise the item needing it is skipped with torch's reason."""
    try:
        import torch
    except ModuleNotFoundError as e:
        if e.name == "torch":
            raise Skip("needs torch, which is absent")
        raise Skip(f"needs torch, which does not import: {error_line(e)}")
    except Exception as e:
        raise Skip(f"needs torch, which does not import: {error_line(e)}")
    if torch.version.cuda is None:
        raise Skip(f"needs torch with CUDA; torch {torch.__version__} is a CPU-only build")
    if not torch.cuda.is_available():
        raise Skip(f"needs a GPU that torch can use; torch.cuda.is_available() is False (torch built for CUDA "
                   f"{torch.version.cuda})")
    return torch


def capability(torch):
    major, minor = torch.cuda.get_device_capability(0)
    return int(major), int(minor)


def rel_err(out, ref):
    return ((out.float() - ref.float()).norm() / ref.float().norm()).item()


def attention_reference(torch, q, k, v):
    """softmax(q k^T / sqrt(d)) v in fp32, for q, k, v of shape (batch, seq, heads, dim)."""
    qf, kf, vf = (x.float().transpose(1, 2) for x in (q, k, v))
    scores = (qf @ kf.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return (scores.softmax(-1) @ vf).transpose(1, 2)


# ------------------------------------------------------------------------------------------------
# Items

def probe_python(r):
    r.version = sys.version.split()[0]
    r.facts["executable"] = sys.executable
    r.detail = sys.executable


def probe_torch(r):
    try:
        import torch
    except ModuleNotFoundError as e:
        if e.name == "torch":
            raise Absent("no module named torch")
        raise
    r.version = torch.__version__
    r.facts["cuda_runtime"] = torch.version.cuda
    if torch.version.cuda is None:
        raise Fail(f"torch {torch.__version__} is a CPU-only build (torch.version.cuda is None): install a CUDA build")
    if not torch.cuda.is_available():
        raise Fail(f"torch.cuda.is_available() is False: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no "
                   f"usable GPU (driver missing or too old, or CUDA_VISIBLE_DEVICES hides it)")
    major, minor = capability(torch)
    name = torch.cuda.get_device_name(0)
    r.facts.update({"device_name": name, "capability": f"{major}.{minor}", "sm": f"sm_{major}{minor}",
                    "device_count": torch.cuda.device_count(), "arch_list": list(torch.cuda.get_arch_list())})
    props = torch.cuda.get_device_properties(0)
    for key in ("uuid", "pci_bus_id"):
        value = getattr(props, key, None)
        if value is not None:
            r.facts[key] = str(value)
    x = torch.arange(1000, device="cuda", dtype=torch.float32)
    total = x.sum().item()
    torch.cuda.synchronize()
    if total != 499500.0:
        raise Fail(f"sum of 0..999 on the GPU gave {total}, expected 499500")
    r.detail = f"CUDA {torch.version.cuda}, {name} (sm_{major}{minor}); a kernel ran and its sum was right"


def parse_arch(entry):
    """'sm_90a' -> ('sm', 90, 'a'); 'compute_90' -> ('compute', 90, ''); None when unreadable."""
    kind, _, rest = entry.partition("_")
    digits = "".join(ch for ch in rest if ch.isdigit())
    if kind not in ("sm", "compute") or not digits:
        return None
    return kind, int(digits), rest[len(digits):]


def probe_arch(r):
    torch = torch_cuda()
    major, minor = capability(torch)
    card = major * 10 + minor
    sm = f"sm_{card}"
    archs = list(torch.cuda.get_arch_list())
    r.version = sm
    r.facts.update({"sm": sm, "arch_list": archs})
    parsed = [(a, parse_arch(a)) for a in archs]
    exact = [a for a, p in parsed if p and p[0] == "sm" and p[1] == card]
    # A cubin for sm_XY runs on sm_XZ with Z >= Y (same major); arch-specific ones ('a', 'f') do not.
    compatible = [a for a, p in parsed if p and p[0] == "sm" and p[1] // 10 == major and p[1] < card and p[2] == ""]
    ptx = [a for a, p in parsed if p and p[0] == "compute" and p[1] <= card]
    if exact:
        how = f"{', '.join(exact)} in torch's list ({', '.join(archs)})"
    elif compatible:
        how = f"no {sm} in torch's list, but {compatible[-1]} kernels run on it (same major) ({', '.join(archs)})"
    elif ptx:
        how = f"no {sm} kernels; {ptx[-1]} PTX is compiled at first use (slow start) ({', '.join(archs)})"
    else:
        raise Fail(f"torch {torch.__version__} was built for {', '.join(archs) or 'no architecture'}; none runs on "
                   f"{sm} (capability {major}.{minor}): install a torch build that includes {sm}")
    y = (torch.ones(256, device="cuda") * 2).sum().item()
    torch.cuda.synchronize()
    if y != 512.0:
        raise Fail(f"a kernel on {sm} gave {y}, expected 512")
    r.detail = how + "; a kernel ran"


def probe_bf16(r):
    torch = torch_cuda()
    torch.manual_seed(0)
    a = torch.randn(SIZE, SIZE, device="cuda")
    b = torch.randn(SIZE, SIZE, device="cuda")
    ref = a.to(torch.bfloat16).float() @ b.to(torch.bfloat16).float()
    out = a.to(torch.bfloat16) @ b.to(torch.bfloat16)
    torch.cuda.synchronize()
    if out.dtype != torch.bfloat16:
        raise Fail(f"a bf16 matmul returned {out.dtype}")
    r.facts["is_bf16_supported"] = bool(torch.cuda.is_bf16_supported())
    r.checked(rel_err(out, ref), 1e-2, f"bf16 {SIZE}x{SIZE}x{SIZE} matmul against fp32 on the same inputs")
    r.detail = f"matmul matches fp32 (relative error {r.check['error']:.2g})"


def probe_fp8(r):
    torch = torch_cuda()
    major, minor = capability(torch)
    if (major, minor) < (8, 9):
        raise Skip(f"fp8 matrix products need sm_89 or newer (Ada, Hopper, Blackwell); this card is sm_{major}{minor}")
    if not hasattr(torch, "float8_e4m3fn"):
        raise Fail(f"torch {torch.__version__} has no torch.float8_e4m3fn (torch 2.1 or newer has it)")
    if not hasattr(torch, "_scaled_mm"):
        raise Fail(f"torch {torch.__version__} has no torch._scaled_mm")
    torch.manual_seed(0)
    a = torch.randn(SIZE, SIZE, device="cuda").to(torch.float8_e4m3fn)
    # The second operand column-major, as cuBLASLt's fp8 kernels want it.
    b = torch.randn(SIZE, SIZE, device="cuda").t().contiguous().to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0, device="cuda")
    out = torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    if isinstance(out, tuple):  # torch before 2.4 returned (out, amax)
        out = out[0]
    torch.cuda.synchronize()
    ref = a.float() @ b.float()
    r.checked(rel_err(out, ref), 2e-2,
              f"torch._scaled_mm float8_e4m3fn {SIZE}x{SIZE}x{SIZE} against fp32 on the same fp8 inputs")
    r.detail = f"torch._scaled_mm e4m3 matches fp32 (relative error {r.check['error']:.2g})"


def attention_inputs(torch, dtype):
    torch.manual_seed(0)
    return [torch.randn(1, 128, 4, 64, device="cuda", dtype=dtype) for _ in range(3)]


def probe_flash_attn(r):
    present("flash_attn")
    torch = torch_cuda()
    flash_attn = load("flash_attn")
    r.version = getattr(flash_attn, "__version__", "")
    from flash_attn import flash_attn_func
    q, k, v = attention_inputs(torch, torch.bfloat16)
    out = flash_attn_func(q, k, v)
    torch.cuda.synchronize()
    r.checked(rel_err(out, attention_reference(torch, q, k, v)), 2e-2,
              "flash_attn_func bf16 (1x128x4x64) against fp32 attention")
    r.detail = f"flash_attn_func matches fp32 attention (relative error {r.check['error']:.2g})"


def probe_xformers(r):
    present("xformers")
    torch = torch_cuda()
    xformers = load("xformers")
    r.version = getattr(xformers, "__version__", "")
    import xformers.ops as xops
    q, k, v = attention_inputs(torch, torch.bfloat16)
    out = xops.memory_efficient_attention(q, k, v)
    torch.cuda.synchronize()
    r.checked(rel_err(out, attention_reference(torch, q, k, v)), 2e-2,
              "memory_efficient_attention bf16 (1x128x4x64) against fp32 attention")
    r.detail = f"memory_efficient_attention matches fp32 attention (relative error {r.check['error']:.2g})"


def probe_bitsandbytes(r):
    present("bitsandbytes")
    torch = torch_cuda()
    bnb = load("bitsandbytes")
    r.version = getattr(bnb, "__version__", "")
    torch.manual_seed(0)
    layer = bnb.nn.Linear4bit(SIZE, SIZE, bias=False, compute_dtype=torch.bfloat16, quant_type="nf4")
    original = layer.weight.data.clone().float()
    layer = layer.cuda()  # quantises the weight to NF4
    x = torch.randn(8, SIZE, device="cuda", dtype=torch.bfloat16)
    out = layer(x)
    torch.cuda.synchronize()
    w = bnb.functional.dequantize_4bit(layer.weight.data, layer.weight.quant_state).float()
    r.facts["nf4_weight_error"] = rel_err(w, original.cuda())
    r.checked(rel_err(out, x.float() @ w.t()), 2e-2, f"Linear4bit nf4 forward (8x{SIZE} by {SIZE}x{SIZE}) against "
                                                      f"fp32 with the dequantised weight")
    r.detail = (f"Linear4bit nf4 forward matches (relative error {r.check['error']:.2g}; weight quantisation error "
                f"{r.facts['nf4_weight_error']:.2g})")


def probe_triton(r):
    present("triton")
    torch = torch_cuda()
    global tl
    triton = load("triton")
    import triton.language as tl
    r.version = getattr(triton, "__version__", "")

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
                 mask=mask)

    n = 1000
    torch.manual_seed(0)
    x = torch.randn(n, device="cuda")
    y = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    torch.cuda.synchronize()
    wrong = (out - (x + y)).abs().max().item()
    if wrong != 0.0:
        raise Fail(f"a @triton.jit vector add differs from torch's by up to {wrong}")
    r.detail = f"a @triton.jit kernel compiled for sm_{''.join(map(str, capability(torch)))}, ran and matched torch"


def probe_transformer_engine(r):
    present("transformer_engine")
    torch = torch_cuda()
    te = load("transformer_engine.pytorch")
    import transformer_engine
    r.version = getattr(transformer_engine, "__version__", "")
    torch.manual_seed(0)
    layer = te.Linear(SIZE, SIZE, bias=True, params_dtype=torch.bfloat16).cuda()
    x = torch.randn(16, SIZE, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        out = layer(x)
        ref = torch.nn.functional.linear(x.float(), layer.weight.float(), layer.bias.float())
    torch.cuda.synchronize()
    r.checked(rel_err(out, ref), 2e-2, f"te.Linear bf16 forward (16x{SIZE} by {SIZE}x{SIZE}) against fp32")
    r.detail = f"te.Linear forward matches fp32 (relative error {r.check['error']:.2g})"
    if capability(torch) >= (8, 9):
        try:
            with torch.no_grad(), te.fp8_autocast(enabled=True):
                out8 = layer(x)
            torch.cuda.synchronize()
            e8 = rel_err(out8, ref)
            r.facts["fp8_autocast_error"] = e8
            r.detail += f"; under fp8_autocast relative error {e8:.2g}"
        except Exception as e:
            r.facts["fp8_autocast"] = error_line(e)
            r.detail += f"; fp8_autocast fails: {error_line(e)}"


PROBES = {
    "python": probe_python,
    "torch": probe_torch,
    "arch": probe_arch,
    "bf16": probe_bf16,
    "fp8": probe_fp8,
    "flash-attn": probe_flash_attn,
    "xformers": probe_xformers,
    "bitsandbytes": probe_bitsandbytes,
    "triton": probe_triton,
    "transformer-engine": probe_transformer_engine,
}


def main(argv):
    if len(argv) != 2 or argv[1] not in PROBES:
        print(f"usage: {argv[0]} ITEM   (ITEM: {', '.join(PROBES)})", file=sys.stderr)
        return 2
    r = Result(argv[1])
    try:
        PROBES[argv[1]](r)
    except Absent as e:
        r.verdict, r.detail = "absent", str(e)
    except Skip as e:
        r.verdict, r.detail = "skipped", str(e)
    except Fail as e:
        r.verdict, r.detail = "fails", str(e)
    except BaseException as e:  # anything the item raised, SystemExit included: it does not work
        r.verdict, r.detail = "fails", error_line(e)
        traceback.print_exc()
    sys.stdout.flush()
    print(MARK + json.dumps(r.__dict__, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
# )itera_py"

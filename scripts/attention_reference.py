"""What PyTorch's own attention kernels reach on this card, as the yardstick for ours.

Causal prefill (llama-3.1-8b: 32 query heads, 8 kv heads, head_dim 128) and the ViT-L/14 encoder
at 224 (16 heads of 64, 257 tokens, 128 images), bf16, every SDPA backend PyTorch offers here,
timed with CUDA events over graph-free back-to-back calls (median of 20 after 5 warm-ups).
FLOP count as itera's: QK^T and PV, 4 * heads * head_dim * (causal: T (T + 1) / 2, else T^2).
Usage: python3 scripts/attention_reference.py
"""
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn, reps=20, warm=5):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def case(name, batch, heads, kv_heads, tokens, d, causal):
    q = torch.randn(batch, heads, tokens, d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(batch, kv_heads, tokens, d, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(batch, kv_heads, tokens, d, device="cuda", dtype=torch.bfloat16)
    if kv_heads != heads:  # not every backend takes grouped heads: give them the expanded K and V
        k = k.repeat_interleave(heads // kv_heads, dim=1)
        v = v.repeat_interleave(heads // kv_heads, dim=1)
    pairs = tokens * (tokens + 1) / 2 if causal else tokens * tokens
    flops = 4.0 * batch * heads * d * pairs
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
        try:
            with sdpa_kernel(backend):
                ms = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
            print(f"{name:32s} {backend.name:22s} {ms:8.3f} ms {flops / ms / 1e9:8.1f} TFLOP/s")
        except RuntimeError as e:
            print(f"{name:32s} {backend.name:22s} not available: {str(e).splitlines()[0][:80]}")


print(torch.__version__, torch.cuda.get_device_name())
case("llm prefill 2048 (one layer)", 1, 32, 8, 2048, 128, True)
case("vit-l/14 224 b128 (one layer)", 128, 16, 16, 257, 64, False)

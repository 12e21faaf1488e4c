#!/usr/bin/env python3
"""A PEFT LoRA fine-tune instrumented with itera (R13): time and memory per phase, with and without
gradient checkpointing, so that the activation memory shows against the few trained parameters.

A Llama (transformers' LlamaForCausalLM, built from a config with random weights: no download) is
frozen in its base precision; PEFT adds LoRA adapters of rank r to the target modules; AdamW trains
the adapters on random token sequences of a fixed example length (the work of a real step, not its
learning). Each training step is an iteration on PyTorch's current stream, with three stages:

  forward    the loss (logits over the vocabulary, cross-entropy): activations are kept for backward
             unless gradient checkpointing drops them and recomputes them in backward
  backward   gradients flow through the frozen base to the adapters' weights
  optimizer  AdamW's step and zeroing the gradients (its state is created on the first step)

Each stage records PyTorch's allocator peak while it ran (memory=True). One case per (example
length, gradient checkpointing); recipe fields: rank, alpha, target modules, base-model precision,
adapter precision, parameters and trainable parameters. docs/lora.md says how to read the results.

    python3 lora_finetune.py --out lora.jsonl
    itera report lora.jsonl
"""

import argparse
import sys

NEEDS = "torch, transformers and peft"


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="results file to write (must not exist)")
    p.add_argument("--rank", type=int, default=16, help="LoRA rank r (default 16)")
    p.add_argument("--alpha", type=int, default=32, help="LoRA alpha (default 32)")
    p.add_argument("--targets", default="q_proj,k_proj,v_proj,o_proj",
                   help="target modules, comma-separated (default q_proj,k_proj,v_proj,o_proj)")
    p.add_argument("--base-precision", choices=("bf16", "fp16", "fp32"), default="bf16")
    p.add_argument("--lengths", default="512,2048", help="example lengths in tokens, comma-separated")
    p.add_argument("--batch", type=int, default=4, help="examples per step (default 4)")
    p.add_argument("--checkpointing", default="off,on", help="gradient checkpointing: off, on or both (default)")
    p.add_argument("--steps", type=int, default=8, help="measured steps per case (default 8)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps per case (default 2)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    a.lengths = [int(x) for x in a.lengths.split(",")]
    a.targets = [t for t in a.targets.split(",") if t]
    a.checkpointing = a.checkpointing.split(",")
    if any(c not in ("off", "on") for c in a.checkpointing):
        p.error("--checkpointing takes off, on or off,on")
    if a.rank < 1 or a.batch < 1 or a.steps < 1 or a.warmup < 0 or min(a.lengths) < 2 or not a.targets:
        p.error("--rank, --batch, --steps and the lengths must be positive, --warmup >= 0, --targets not empty")
    return a


def build(a, torch, transformers, peft, checkpointing):
    """A fresh base model and adapters: each case starts from the same memory."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[a.base_precision]
    heads = a.hidden // 64
    cfg = transformers.LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden,
                                   intermediate_size=int(a.hidden * 2.75) // 64 * 64, num_hidden_layers=a.layers,
                                   num_attention_heads=heads, num_key_value_heads=max(1, heads // 4),
                                   max_position_embeddings=max(4096, max(a.lengths)), use_cache=False)
    torch.manual_seed(a.seed)
    with torch.device("cuda"):
        base = transformers.LlamaForCausalLM(cfg).to(dtype)
    lora = peft.LoraConfig(r=a.rank, lora_alpha=a.alpha, target_modules=a.targets, lora_dropout=0.0, bias="none",
                           task_type="CAUSAL_LM")
    model = peft.get_peft_model(base, lora)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-4)
    counts = {
        "parameters": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in trainable),
        "adapter_dtype": str(trainable[0].dtype).replace("torch.", ""),
    }
    return model, optimizer, cfg, counts


PRECISION_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def main(argv=None):
    a = parse_args(argv)
    try:
        import torch
        import transformers
        import peft
    except ImportError as e:
        print(f"SKIPPED: this example needs {NEEDS} ({e})", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("SKIPPED: this example needs a CUDA device PyTorch can use", file=sys.stderr)
        return 77
    import itera

    MiB = 1 << 20
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(a.seed)
    with itera.Session("lora_finetune", a.out, label="python/examples/lora_finetune.py",
                       fields={"framework": f"torch {torch.__version__}, transformers {transformers.__version__}, "
                                            f"peft {peft.__version__}"}) as s:
        for length in a.lengths:
            for ckpt in a.checkpointing:
                model, optimizer, cfg, counts = build(a, torch, transformers, peft, ckpt == "on")
                torch.cuda.synchronize()
                fields = {
                    "model": f"LlamaForCausalLM random weights: hidden {cfg.hidden_size}, {cfg.num_hidden_layers} "
                             f"layers, {cfg.num_attention_heads}/{cfg.num_key_value_heads} heads, vocab {cfg.vocab_size}",
                    "lora.rank": a.rank, "lora.alpha": a.alpha, "lora.target_modules": ",".join(a.targets),
                    "lora.dropout": 0.0, "precision.weights": a.base_precision,
                    "precision.adapter": PRECISION_NAMES.get(counts["adapter_dtype"], counts["adapter_dtype"]),
                    "precision.compute": a.base_precision, "optimizer": "AdamW lr=1e-4 (adapters only)",
                    "model.parameters": counts["parameters"], "lora.trainable_parameters": counts["trainable"],
                }
                axes = {"example_tokens": length, "batch": a.batch, "gradient_checkpointing": ckpt}
                it = s.iteration(torch.cuda.current_stream())
                forward = s.stage("forward", torch.cuda.current_stream(), memory=True)
                backward = s.stage("backward", torch.cuda.current_stream(), memory=True)
                step = s.stage("optimizer", torch.cuda.current_stream(), memory=True)
                with s.case(axes, warmup=a.warmup, fields=fields) as case:
                    s.mark_torch_memory("weights")  # base and adapters, before any step
                    for _ in range(a.warmup + a.steps):
                        ids = torch.randint(0, a.vocab, (a.batch, length), device="cuda", generator=gen)
                        with it:
                            s.mark_torch_memory("step_start")  # weights, adapters' optimizer state
                            with forward:
                                loss = model(input_ids=ids, labels=ids).loss
                            with backward:
                                loss.backward()
                            with step:
                                optimizer.step()
                                optimizer.zero_grad(set_to_none=True)
                            s.count("tokens", a.batch * length)
                            s.count("items", a.batch)
                            s.count("steps", 1)  # throughput/steps_per_s: itera cost prices a step
                    s.mark_torch_memory("case_end_allocated")
                r = case.record
                m = {x["name"]: x["value"] for x in r.get("metrics", [])}
                st = {x["path"]: x for x in r["stages"]}
                n = len(r["samples"]["device_ns"]) or 1
                median_ms = r["stats"]["device"]["median"] / 1e6 if r["status"] == "ok" else 0.0
                rows.append((length, ckpt, counts, m, st, n, median_ms, r["status"], r.get("message", "")))
                del model, optimizer, loss
                torch.cuda.empty_cache()

    print(f"\nLoRA r={a.rank} on {','.join(a.targets)}, base {a.base_precision}, batch {a.batch}: "
          f"{rows[0][2]['trainable']:,} trainable of {rows[0][2]['parameters']:,} parameters "
          f"({100 * rows[0][2]['trainable'] / rows[0][2]['parameters']:.2f}%)")
    print("| example tokens | checkpointing | step ms (median) | forward ms | backward ms | optimizer ms | weights MiB | "
          "forward peak MiB | activations MiB | backward peak MiB | trainable MiB (fp32 + grads + AdamW) |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for length, ckpt, counts, m, st, n, median_ms, status, message in rows:
        if status != "ok":
            print(f"| {length} | {ckpt} | {status}: {message} |")
            continue
        per = {k: st[k]["device_ns"] / n / 1e6 for k in ("forward", "backward", "optimizer")}
        weights = m.get("memory/mark/weights/allocator", 0)
        start = m.get("memory/mark/step_start/allocator", 0)
        fwd = m.get("memory/mark/forward/allocator", 0)
        bwd = m.get("memory/mark/backward/allocator", 0)
        trainable_bytes = counts["trainable"] * 4 * 4  # weights, gradients, Adam's two moments (fp32)
        print(f"| {length} | {ckpt} | {median_ms:.1f} | {per['forward']:.1f} | {per['backward']:.1f} | {per['optimizer']:.2f} | {weights / MiB:.0f} | "
              f"{fwd / MiB:.0f} | {(fwd - start) / MiB:.0f} | {bwd / MiB:.0f} | {trainable_bytes / MiB:.1f} |")
    print(f"\nwrote {a.out}: `itera report {a.out}` renders it; docs/lora.md says how to read it", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

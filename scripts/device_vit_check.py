#!/usr/bin/env python3
"""The vision encoder's cpu reference (itera_vit_check) against Hugging Face transformers.

For the GPU host (torch, transformers, safetensors, numpy; no internet). Two directions:

1. transformers -> itera. For each shape (ViT-L/14 at 224 and 336, SigLIP so400m at 384): build
   CLIPVisionModel / SiglipVisionModel from a config with random float32 weights (every parameter
   drawn, biases and LayerNorms included, at the scales itera uses), save it with save_pretrained
   (config.json + model.safetensors; SigLIP keeps its pooling head, which itera must leave alone),
   and a LLaVA-1.5 projector (Linear -> GELU -> Linear) as projector.safetensors beside it. Run
   itera_vit_check on that folder in fp32 (weights and activations) and in bf16, and compare the
   features with last_hidden_state, the image tokens with the projector applied to the selected
   tokens (CLIP: the patches, class token left out), by normalised error ||a - b|| / ||b||.
   transformers runs in float32 on the GPU with TF32 off; its own bf16 run is printed for scale.
2. itera -> transformers. itera_vit_check --write saves tiny CLIP- and SigLIP-shaped checkpoints;
   transformers loads them with from_pretrained and must give itera's features.

Usage (the binary built on the build machine, bundled with its libraries):
  python3 scripts/device_vit_check.py --tool BUNDLE/bin/itera_vit_check --out OUT [--images 2] [--quick]
BUNDLE/lib is put on the tool's LD_LIBRARY_PATH (not python's). --quick: 2 layers per shape.
Prints one line per comparison and a table; writes OUT/vit_check.json; exits 1 when any
comparison fails its threshold: fp32 < 1e-4 (features and image tokens), bf16 < 3e-2, the reverse
direction < 1e-5, and the parameter counts equal.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

FP32_LIMIT = 1e-4
BF16_LIMIT = 3e-2
REVERSE_LIMIT = 1e-5

SHAPES = {
    # name: (family, config fields); from the models' config.json on Hugging Face.
    "clip-vit-large-patch14": ("clip", dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                                            num_attention_heads=16, image_size=224, patch_size=14,
                                            hidden_act="quick_gelu", layer_norm_eps=1e-5)),
    "clip-vit-large-patch14-336": ("clip", dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                                                num_attention_heads=16, image_size=336, patch_size=14,
                                                hidden_act="quick_gelu", layer_norm_eps=1e-5)),
    "siglip-so400m-patch14-384": ("siglip", dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27,
                                                 num_attention_heads=16, image_size=384, patch_size=14,
                                                 hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)),
}
LLM_HIDDEN = 4096


def normalised_error(out, ref):
    out = np.asarray(out, dtype=np.float64).ravel()
    ref = np.asarray(ref, dtype=np.float64).ravel()
    if out.shape != ref.shape:
        raise ValueError(f"shapes differ: {out.shape} against {ref.shape}")
    norm = np.linalg.norm(ref)
    return float(np.linalg.norm(out - ref) / norm) if norm > 0 else float(np.linalg.norm(out))


def tool_env(tool):
    env = dict(os.environ)
    lib = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(tool))), "lib")
    if os.path.isdir(lib):
        env["LD_LIBRARY_PATH"] = lib + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    return env


def run_tool(tool, args):
    proc = subprocess.run([tool] + args, capture_output=True, text=True, env=tool_env(tool))
    if proc.returncode != 0:
        raise RuntimeError(f"{os.path.basename(tool)} {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def read_f32(path, shape):
    data = np.fromfile(path, dtype="<f4")
    return data.reshape(shape)


def randomize(module, seed):
    """Every parameter drawn at itera's scales: matrices std 1/sqrt(fan in), LayerNorm weights
    uniform in [0.9, 1.1), everything else (biases, class embedding) std 0.02."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    norm_weight = re.compile(r"(layer_?norm\d*|layrnorm)\.weight$")
    with torch.no_grad():
        for name, p in module.named_parameters():
            if norm_weight.search(name):
                value = 1.0 + 0.1 * (2.0 * torch.rand(p.shape, generator=gen) - 1.0)
            elif p.dim() >= 2:
                fan_in = p[0].numel()
                value = torch.randn(p.shape, generator=gen) / fan_in ** 0.5
            else:
                value = 0.02 * torch.randn(p.shape, generator=gen)
            p.copy_(value.to(p.dtype))


def build(name, family, fields, folder, layers, seed):
    import torch
    from safetensors.torch import save_file
    from transformers import CLIPVisionConfig, CLIPVisionModel, SiglipVisionConfig, SiglipVisionModel
    fields = dict(fields)
    if layers:
        fields["num_hidden_layers"] = layers
    if family == "clip":
        model = CLIPVisionModel(CLIPVisionConfig(**fields))
    else:
        model = SiglipVisionModel(SiglipVisionConfig(**fields))  # vision_use_head defaults on: a head to ignore
    model = model.float().eval()
    randomize(model, seed)
    model.save_pretrained(folder, safe_serialization=True)
    hidden = fields["hidden_size"]
    projector = torch.nn.Sequential(torch.nn.Linear(hidden, LLM_HIDDEN), torch.nn.GELU(),
                                    torch.nn.Linear(LLM_HIDDEN, LLM_HIDDEN)).float().eval()
    randomize(projector, seed + 1)
    save_file({"multi_modal_projector.linear_1.weight": projector[0].weight.detach().contiguous(),
               "multi_modal_projector.linear_1.bias": projector[0].bias.detach().contiguous(),
               "multi_modal_projector.linear_2.weight": projector[2].weight.detach().contiguous(),
               "multi_modal_projector.linear_2.bias": projector[2].bias.detach().contiguous()},
              os.path.join(folder, "projector.safetensors"), metadata={"format": "pt"})
    # What itera runs: CLIP's post_layernorm applies to the pooled class token only, SigLIP's head
    # pools; neither is part of the features.
    # (transformers 5 names a vision model's parameters without the "vision_model." level.)
    def bare(n):
        return n[len("vision_model."):] if n.startswith("vision_model.") else n
    used = sum(p.numel() for n, p in model.named_parameters()
               if not bare(n).startswith("head.") and
               not (family == "clip" and bare(n).startswith("post_layernorm.")))
    return model, projector, used


def torch_device():
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def forward(model, pixels, device, dtype):
    import torch
    with torch.no_grad():
        m = model.to(device=device, dtype=dtype)
        out = m(pixel_values=pixels.to(device=device, dtype=dtype)).last_hidden_state
        return out.float().cpu().numpy()


def check_shape(args, name, family, fields, work, results):
    import torch
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    layers = 2 if args.quick else 0
    t0 = time.time()
    model, projector, used_params = build(name, family, fields, folder, layers, seed=1)
    side = fields["image_size"]
    gen = torch.Generator().manual_seed(7)
    pixels = torch.randn(args.images, 3, side, side, generator=gen)
    pixel_file = os.path.join(folder, "pixels.f32")
    pixels.numpy().astype("<f4").tofile(pixel_file)
    device = torch_device()
    ref = forward(model, pixels, device, torch.float32)
    ref_bf16 = forward(model, pixels, device, torch.bfloat16)
    selected = ref[:, 1:] if family == "clip" else ref  # LLaVA's default: the class token left out
    with torch.no_grad():
        tokens_ref = projector.to(device)(torch.from_numpy(np.ascontiguousarray(selected)).to(device)).cpu().numpy()
    model.to("cpu")
    print(f"{name}: built and ran transformers in {time.time() - t0:.1f} s on {device}", flush=True)

    for weights, acts in (("fp32", "fp32"), ("bf16", "bf16")):
        out = os.path.join(folder, f"itera-{acts}")
        info = run_tool(args.tool, ["--checkpoint", folder, "--pixels", pixel_file, "--out", out,
                                    "--weights", weights, "--activations", acts])
        feats = read_f32(os.path.join(out, "features.f32"), (info["images"], info["tokens"], info["hidden"]))
        toks = read_f32(os.path.join(out, "image_tokens.f32"), (info["images"], info["image_tokens"], info["llm_hidden"]))
        limit = FP32_LIMIT if acts == "fp32" else BF16_LIMIT
        for what, mine, theirs in (("features", feats, ref), ("image tokens", toks, tokens_ref)):
            err = normalised_error(mine, theirs)
            row = {"shape": name, "layers": info["layers"], "what": what, "precision": acts, "error": err,
                   "limit": limit, "passed": err < limit, "itera_seconds": info["seconds"]}
            if what == "features" and acts == "bf16":
                row["transformers_bf16_error"] = normalised_error(ref_bf16, ref)
            results.append(row)
            extra = f" (transformers' own bf16: {row['transformers_bf16_error']:.3g})" if "transformers_bf16_error" in row else ""
            print(f"  {what:>12} {acts}: normalised error {err:.3g} (limit {limit:g}){extra} "
                  f"{'ok' if row['passed'] else 'FAILED'}", flush=True)
        if acts == "fp32":
            same = info["params_encoder"] == used_params and info["has_projector"]
            results.append({"shape": name, "what": "parameters", "itera": info["params_encoder"],
                            "transformers": used_params, "passed": same})
            print(f"  parameters: itera {info['params_encoder']:,}, transformers {used_params:,} "
                  f"(CLIP's post_layernorm and SigLIP's head left out) {'ok' if same else 'FAILED'}", flush=True)


def check_reverse(args, work, results):
    import torch
    from transformers import CLIPVisionModel, SiglipVisionModel
    for preset, cls in (("tiny", CLIPVisionModel), ("tiny-siglip", SiglipVisionModel)):
        folder = os.path.join(work, f"written-{preset}")
        run_tool(args.tool, ["--write", folder, "--preset", preset, "--seed", "5", "--dtype", "fp32"])
        model = cls.from_pretrained(folder).float().eval()
        side = model.config.image_size
        pixels = torch.randn(3, model.config.num_channels, side, side, generator=torch.Generator().manual_seed(3))
        pixel_file = os.path.join(folder, "pixels.f32")
        pixels.numpy().astype("<f4").tofile(pixel_file)
        info = run_tool(args.tool, ["--checkpoint", folder, "--pixels", pixel_file, "--out", os.path.join(folder, "out"),
                                    "--weights", "fp32", "--activations", "fp32"])
        feats = read_f32(os.path.join(folder, "out", "features.f32"), (info["images"], info["tokens"], info["hidden"]))
        ref = forward(model, pixels, torch.device("cpu"), torch.float32)
        err = normalised_error(feats, ref)
        results.append({"shape": preset, "what": "written by itera, read by transformers", "precision": "fp32",
                        "error": err, "limit": REVERSE_LIMIT, "passed": err < REVERSE_LIMIT})
        print(f"{preset}: itera's checkpoint in {cls.__name__}: normalised error {err:.3g} "
              f"(limit {REVERSE_LIMIT:g}) {'ok' if err < REVERSE_LIMIT else 'FAILED'}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tool", required=True, help="itera_vit_check (its bundle's lib/ goes on its library path)")
    parser.add_argument("--out", default=None, help="folder for vit_check.json (default: a new temporary folder)")
    parser.add_argument("--work", default=None, help="folder for the checkpoints (default: a temporary one, removed)")
    parser.add_argument("--images", type=int, default=2, help="images per shape")
    parser.add_argument("--quick", action="store_true", help="2 layers per shape instead of the full depth")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    args = parser.parse_args()
    if not os.access(args.tool, os.X_OK):
        sys.exit(f"--tool {args.tool}: not an executable (build tests/multimodal/vit: target itera_vit_check)")
    out = args.out or tempfile.mkdtemp(prefix="itera-vit-check-")
    os.makedirs(out, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="itera-vit-ckpt-") as tmp:
        work = args.work or tmp
        for name in [s for s in args.shapes.split(",") if s]:
            if name not in SHAPES:
                sys.exit(f"--shapes: unknown shape '{name}' (choose from {', '.join(SHAPES)})")
            family, fields = SHAPES[name]
            check_shape(args, name, family, fields, work, results)
        check_reverse(args, work, results)
    import torch
    import transformers
    summary = {"torch": torch.__version__, "transformers": transformers.__version__,
               "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
               "quick": args.quick, "images": args.images, "results": results}
    with open(os.path.join(out, "vit_check.json"), "w") as f:
        json.dump(summary, f, indent=2)
    failed = [r for r in results if not r["passed"]]
    print(f"\n| shape | what | precision | error | limit |\n|---|---|---|---:|---:|")
    for r in results:
        if "error" in r:
            print(f"| {r['shape']} | {r['what']} | {r['precision']} | {r['error']:.3g} | {r['limit']:g} |")
    print(f"\n{len(results) - len(failed)} passed, {len(failed)} failed (details: {os.path.join(out, 'vit_check.json')})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

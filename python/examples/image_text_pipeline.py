#!/usr/bin/env python3
"""An image-text pipeline instrumented with itera, in both loops (R1, R9, R10).

A vision encoder (transformers' CLIPVisionModel) turns each image into patch embeddings, a projector
maps them into a small Llama's embedding space, they are placed before a prompt, and the Llama
generates a fixed number of tokens greedily with its KV cache. Models are built from configs with
random weights (no download): the shapes and the work are real, the answers are not.

  loop=compute     inputs already on the GPU: pixel tensors and prompt ids made once, outside the loop
  loop=end_to_end  from image files on disk: read, decode (PIL), preprocess (CLIP: resize the shorter
                   side, centre crop, normalise), transfer to the GPU, then the same compute (encode,
                   context, prefill, generate), and the generated ids brought back (fetch)

Every stage is timed on the host and, for GPU work, on PyTorch's current stream; GPU stages also
record PyTorch's allocator peak (memory=True). One case per (loop, images per request, batch); then,
with --serve-requests, the end-to-end loop one request at a time through the runner's single stream,
reporting each generated token (TTFT, TPOT).

Images: a folder from `itera data images --out DIR` (its manifest.json), or any folder of JPEG/PNG
files. R18: itera is given labels and counts only; file names, pixels and tokens never reach it.

    itera data images --out /tmp/images --sizes 224,448,1280x720 --requests 8
    python3 image_text_pipeline.py --images /tmp/images --out pipeline.jsonl
    itera report pipeline.jsonl
"""

import argparse
import io
import json
import os
import sys

NEEDS = "torch, transformers and pillow"
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", help="folder of images (itera data images --out DIR); needed for loop=end_to_end")
    p.add_argument("--out", required=True, help="results file to write (must not exist)")
    p.add_argument("--batches", default="1,4", help="requests per batch, comma-separated (default 1,4)")
    p.add_argument("--images-per-request", default="1,2", help="images per request, comma-separated (default 1,2)")
    p.add_argument("--loops", default="compute,end_to_end", help="which loops (default compute,end_to_end)")
    p.add_argument("--iterations", type=int, default=6, help="measured iterations per case (default 6)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up iterations per case (default 2)")
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--image-side", type=int, default=224, help="the vision encoder's input side (default 224)")
    p.add_argument("--serve-requests", type=int, default=16,
                   help="end-to-end requests through the runner's single stream (0: none; default 16)")
    p.add_argument("--llm-layers", type=int, default=8)
    p.add_argument("--llm-hidden", type=int, default=1024)
    p.add_argument("--vision-layers", type=int, default=6)
    p.add_argument("--vision-hidden", type=int, default=384)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args(argv)
    a.batches = [int(x) for x in a.batches.split(",")]
    a.images_per_request = [int(x) for x in a.images_per_request.split(",")]
    a.loops = a.loops.split(",")
    for loop in a.loops:
        if loop not in ("compute", "end_to_end"):
            p.error(f"--loops: '{loop}' is not a loop (compute, end_to_end)")
    if ("end_to_end" in a.loops or a.serve_requests) and not a.images:
        p.error("--images DIR is needed for the end-to-end loop (make one with `itera data images --out DIR`)")
    if a.iterations < 1 or a.warmup < 0 or min(a.batches) < 1 or min(a.images_per_request) < 1:
        p.error("--iterations, --batches and --images-per-request must be positive, --warmup >= 0")
    return a


def image_files(folder):
    """The image files of a folder: from an itera manifest when there is one, else every JPEG/PNG."""
    manifest = os.path.join(folder, "manifest.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            m = json.load(f)
        files = [os.path.join(folder, e["path"]) for e in m["images"]]
    else:
        files = []
        for root, _, names in os.walk(folder):
            files += [os.path.join(root, n) for n in sorted(names)
                      if n.lower().endswith((".jpg", ".jpeg", ".png"))]
    if not files:
        raise SystemExit(f"no images in the folder given to --images; make some with `itera data images --out DIR`")
    return files


class Pipeline:
    def __init__(self, a, torch, transformers):
        self.torch = torch
        self.a = a
        torch.manual_seed(a.seed)
        dev = torch.device("cuda")
        vcfg = transformers.CLIPVisionConfig(hidden_size=a.vision_hidden, intermediate_size=4 * a.vision_hidden,
                                             num_hidden_layers=a.vision_layers, num_attention_heads=a.vision_hidden // 64,
                                             image_size=a.image_side, patch_size=16)
        heads = a.llm_hidden // 64
        lcfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=a.llm_hidden,
                                        intermediate_size=int(a.llm_hidden * 2.75) // 64 * 64,
                                        num_hidden_layers=a.llm_layers, num_attention_heads=heads,
                                        num_key_value_heads=max(1, heads // 4), max_position_embeddings=4096)
        with dev:
            self.vision = transformers.CLIPVisionModel(vcfg).to(torch.bfloat16).eval()
            self.llm = transformers.LlamaForCausalLM(lcfg).to(torch.bfloat16).eval()
            self.projector = torch.nn.Linear(a.vision_hidden, a.llm_hidden, dtype=torch.bfloat16)
        self.tokens_per_image = (a.image_side // 16) ** 2 + 1
        self.embed = self.llm.get_input_embeddings()
        self.mean = torch.tensor(CLIP_MEAN).view(3, 1, 1)
        self.std = torch.tensor(CLIP_STD).view(3, 1, 1)
        self.describe = {
            "model.vision": f"CLIPVisionModel random weights: hidden {a.vision_hidden}, {a.vision_layers} layers, "
                            f"patch 16, {a.image_side} px",
            "model.llm": f"LlamaForCausalLM random weights: hidden {a.llm_hidden}, {a.llm_layers} layers, "
                         f"{heads}/{lcfg.num_key_value_heads} heads, vocab 32000",
            "precision.weights": "bf16", "precision.compute": "bf16", "precision.kv_cache": "bf16",
            "generation": "greedy, KV cache, fixed output length",
        }

    @staticmethod
    def decode(data):
        """The file's bytes to RGB pixels (PIL decodes when the image is converted)."""
        from PIL import Image
        with Image.open(io.BytesIO(data)) as img:
            return img.convert("RGB")

    def preprocess(self, img):
        """CLIP preprocessing on the CPU: shorter side to S (bicubic), centre crop S x S, [0, 1], normalise."""
        from PIL import Image
        import numpy as np
        side = self.a.image_side
        w, h = img.size
        scale = side / min(w, h)
        img = img.resize((max(side, round(w * scale)), max(side, round(h * scale))), Image.BICUBIC)
        w, h = img.size
        left, top = (w - side) // 2, (h - side) // 2
        img = img.crop((left, top, left + side, top + side))
        pixels = np.asarray(img, dtype=np.float32) / 255.0
        t = self.torch.from_numpy(pixels).permute(2, 0, 1)
        return (t - self.mean) / self.std

    def from_files(self, s, blobs):
        """decode and preprocess stages: pinned host pixels, ready to transfer."""
        with s.stage("decode"):
            images = [self.decode(x) for x in blobs]
        with s.stage("preprocess"):
            return self.torch.stack([self.preprocess(x) for x in images]).pin_memory()

    def encode_and_context(self, s, pixels, prompt_ids, images_per_request):
        torch = self.torch
        with s.stage("encode", "current", memory=True):
            patches = self.vision(pixel_values=pixels).last_hidden_state
        with s.stage("context", "current", memory=True):
            image_tokens = self.projector(patches)  # (B*K, T, H)
            b = prompt_ids.shape[0]
            image_tokens = image_tokens.reshape(b, images_per_request * self.tokens_per_image, -1)
            context = torch.cat([image_tokens, self.embed(prompt_ids)], dim=1)
        return context

    def generate(self, s, context, on_token=None):
        torch = self.torch
        a = self.a
        with s.stage("prefill", "current", memory=True):
            out = self.llm(inputs_embeds=context, use_cache=True)
            cache = out.past_key_values
            next_id = out.logits[:, -1].argmax(-1, keepdim=True)
            del out
        ids = [next_id]
        if on_token:
            on_token(next_id)
        with s.stage("generate", "current", memory=True):
            for _ in range(a.output_tokens - 1):
                out = self.llm(input_ids=next_id, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                next_id = out.logits[:, -1].argmax(-1, keepdim=True)
                ids.append(next_id)
                if on_token:
                    on_token(next_id)
        return torch.cat(ids, dim=1)


def main(argv=None):
    a = parse_args(argv)
    try:
        import torch
        import transformers
        import PIL  # noqa: F401
    except ImportError as e:
        print(f"SKIPPED: this example needs {NEEDS} ({e})", file=sys.stderr)
        return 77
    if not torch.cuda.is_available():
        print("SKIPPED: this example needs a CUDA device PyTorch can use", file=sys.stderr)
        return 77
    import itera

    files = image_files(a.images) if a.images else []
    pipe = Pipeline(a, torch, transformers)
    gen = torch.Generator(device="cpu").manual_seed(a.seed)
    fields = dict(pipe.describe, framework=f"torch {torch.__version__}, transformers {transformers.__version__}")
    with torch.inference_mode(), itera.Session("image_text_pipeline", a.out, fields=fields,
                                               label="python/examples/image_text_pipeline.py") as s:
        print(f"itera session on {s.backend} (device {s.device}); torch memory: {s.torch_memory}", file=sys.stderr)
        cursor = 0
        for loop in a.loops:
            for k in a.images_per_request:
                for b in a.batches:
                    n_images = b * k
                    axes = {"loop": loop, "images_per_request": k, "batch": b, "prompt_tokens": a.prompt_tokens,
                            "output_tokens": a.output_tokens, "image_side": a.image_side}
                    prompt_ids = torch.randint(0, 32000, (b, a.prompt_tokens), generator=gen)
                    if loop == "compute":  # inputs on the GPU before the loop
                        gpu_pixels = torch.randn(n_images, 3, a.image_side, a.image_side, generator=gen).to(
                            "cuda", torch.bfloat16)
                        gpu_prompt = prompt_ids.cuda()
                        torch.cuda.synchronize()
                    with s.case(axes, warmup=a.warmup) as case:
                        s.mark_torch_memory("case_start")
                        for _ in range(a.warmup + a.iterations):
                            with s.iteration("current"):
                                if loop == "compute":
                                    pixels, prompt = gpu_pixels, gpu_prompt
                                else:
                                    batch_files = [files[(cursor + i) % len(files)] for i in range(n_images)]
                                    cursor += n_images
                                    with s.stage("read"):
                                        blobs = []
                                        for path in batch_files:
                                            with open(path, "rb") as f:
                                                blobs.append(f.read())
                                        s.count("bytes_read", sum(len(x) for x in blobs))
                                    host = pipe.from_files(s, blobs)
                                    with s.stage("transfer", "current"):
                                        pixels = host.to("cuda", non_blocking=True).to(torch.bfloat16)
                                        prompt = prompt_ids.pin_memory().to("cuda", non_blocking=True)
                                        s.count("bytes_written", host.numel() * host.element_size())
                                context = pipe.encode_and_context(s, pixels, prompt, k)
                                ids = pipe.generate(s, context)
                                with s.stage("fetch", "current"):
                                    ids.to("cpu")  # the answer is back on the host: the request is done
                                s.count("items", b)
                                s.count("images", n_images)
                                s.count("tokens", b * (k * pipe.tokens_per_image + a.prompt_tokens))
                                s.count("output_tokens", b * a.output_tokens)
                    rec = case.record
                    median = rec["stats"]["device"]["median"] / 1e6 if rec["status"] == "ok" else float("nan")
                    print(f"loop={loop} images/request={k} batch={b}: {rec['status']}, median iteration "
                          f"{median:.2f} ms", file=sys.stderr)

        if a.serve_requests:
            # One request at a time through the runner: latency from issue to the last token, tokens
            # reported as they reach the host (TTFT, TPOT).
            k = a.images_per_request[0]

            def request(call):
                first = (call.index * k) % len(files)
                with s.stage("read"):
                    blobs = []
                    for i in range(k):
                        with open(files[(first + i) % len(files)], "rb") as f:
                            blobs.append(f.read())
                host = pipe.from_files(s, blobs)
                with s.stage("transfer", "current"):
                    pixels = host.to("cuda", non_blocking=True).to(torch.bfloat16)
                    prompt = torch.randint(0, 32000, (1, a.prompt_tokens), generator=gen).to("cuda")
                context = pipe.encode_and_context(s, pixels, prompt, k)
                pipe.generate(s, context, on_token=lambda t: (t.to("cpu"), call.token()))
                s.count("images", k)

            summary = s.run_single_stream(request, requests=a.serve_requests, warmup_requests=2,
                                          axes={"loop": "end_to_end", "images_per_request": k,
                                                "prompt_tokens": a.prompt_tokens, "output_tokens": a.output_tokens,
                                                "image_side": a.image_side},
                                          stream="current")
            rec = summary.cases[0]
            m = {x["name"]: x["value"] for x in rec.get("metrics", [])}
            print(f"single stream, {a.serve_requests} requests: {rec['status']}, TTFT p50 "
                  f"{m.get('latency/ttft/p50', float('nan')) * 1e3:.1f} ms, TPOT p50 "
                  f"{m.get('latency/tpot/p50', float('nan')) * 1e3:.2f} ms", file=sys.stderr)
    print(f"wrote {a.out}: `itera report {a.out}` renders it", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

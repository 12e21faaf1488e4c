#!/usr/bin/env python3
"""Checks itera's CPU preprocessing reference (workloads/multimodal/preprocess.hpp) against PIL, and,
where transformers is installed, against transformers' CLIPImageProcessor (crop mode).

  itera data preprocess DIR --mode crop --size 224 --out NPY
  python3 scripts/multimodal_check_preprocess.py --images DIR --npy NPY --mode crop --size 224 [--hf]

NPY holds NNNNNN.npy (float32 [views, 3, S, S]) per image index. The index order is itera's listing:
the manifest's order for a generated set, otherwise files with an image extension, recursively,
hidden ones left out, sorted by '/'-separated relative path. Each image is opened with PIL,
converted to RGB and preprocessed the same way (PIL's bicubic resize, floor centre crop or InternVL
tiles, transformers' rescale + normalise in float32); the arrays must be equal bit for bit. With
--hf, crop mode is also compared with CLIPImageProcessor's pixel_values (must be equal too).
Prints one line per image and a summary; exits 1 on any mismatch, 2 on bad arguments.
"""
import argparse
import json
import os
import sys

import numpy as np
from PIL import Image

CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)
IMAGE_EXTENSIONS = {".jpg", ".jpeg", ".jpe", ".jfif", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff",
                    ".heic", ".heif", ".avif", ".jp2", ".j2k", ".jxl"}


def listing(root):
    manifest = os.path.join(root, "manifest.json")
    if os.path.isfile(manifest):
        try:
            with open(manifest, encoding="utf-8") as f:
                m = json.load(f)
            if isinstance(m, dict) and m.get("format") == "itera.images/1":
                return [e["path"] for e in m["images"]]
        except ValueError:
            pass
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.startswith(".") or os.path.splitext(name)[1].lower() not in IMAGE_EXTENSIONS:
                continue
            found.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return sorted(found)


def closest_grid(width, height, size, min_tiles, max_tiles):
    """InternVL's find_closest_aspect_ratio over its sorted target ratios (ties within one product
    ordered by columns then rows, as itera orders them)."""
    ratios = sorted({(i, j) for n in range(min_tiles, max_tiles + 1) for i in range(1, n + 1)
                     for j in range(1, n + 1) if min_tiles <= i * j <= max_tiles},
                    key=lambda r: (r[0] * r[1], r[0], r[1]))
    aspect = width / height
    area = width * height
    best_diff, best = float("inf"), (1, 1)
    for r in ratios:
        diff = abs(aspect - r[0] / r[1])
        if diff < best_diff:
            best_diff, best = diff, r
        elif diff == best_diff and area > 0.5 * size * size * r[0] * r[1]:
            best = r
    return best


def views(img, mode, size, max_tiles):
    w, h = img.size
    if mode == "crop":
        if w <= h:
            nw, nh = size, int(size * h / w)
        else:
            nw, nh = int(size * w / h), size
        r = img.resize((nw, nh), Image.BICUBIC) if (nw, nh) != (w, h) else img.copy()
        a = np.asarray(r)
        top, left = (nh - size) // 2, (nw - size) // 2
        return [a[top:top + size, left:left + size]]
    cols, rows = closest_grid(w, h, size, 1, max_tiles)
    r = np.asarray(img.resize((cols * size, rows * size), Image.BICUBIC))
    out = [r[(t // cols) * size:(t // cols + 1) * size, (t % cols) * size:(t % cols + 1) * size]
           for t in range(cols * rows)]
    if cols * rows > 1:
        out.append(np.asarray(img.resize((size, size), Image.BICUBIC)))
    return out


def normalise(view):
    x = (view.astype(np.float64) * (1 / 255)).astype(np.float32)
    y = (x - np.array(CLIP_MEAN, dtype=np.float32)) / np.array(CLIP_STD, dtype=np.float32)
    return y.transpose(2, 0, 1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--images", required=True)
    p.add_argument("--npy", required=True)
    p.add_argument("--mode", choices=["crop", "tiles"], required=True)
    p.add_argument("--size", type=int, required=True)
    p.add_argument("--max-tiles", type=int, default=12)
    p.add_argument("--hf", action="store_true", help="also compare with transformers' CLIPImageProcessor (crop)")
    a = p.parse_args()
    paths = listing(a.images)
    files = sorted(f for f in os.listdir(a.npy) if f.endswith(".npy"))
    if not files:
        print(f"no .npy files in {a.npy}: run itera data preprocess ... --out {a.npy} first", file=sys.stderr)
        return 2
    hf = None
    if a.hf:
        try:
            from transformers import CLIPImageProcessor
        except ImportError as e:
            print(f"--hf: transformers is not importable here ({e})", file=sys.stderr)
            return 2
        if a.mode != "crop":
            print("--hf compares crop mode only", file=sys.stderr)
            return 2
        hf = CLIPImageProcessor(do_resize=True, size={"shortest_edge": a.size}, resample=Image.BICUBIC,
                                do_center_crop=True, crop_size={"height": a.size, "width": a.size},
                                do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                                image_mean=list(CLIP_MEAN), image_std=list(CLIP_STD), do_convert_rgb=True)
    bad = 0
    for f in files:
        index = int(f[:-4])
        got = np.load(os.path.join(a.npy, f))
        with Image.open(os.path.join(a.images, paths[index])) as im:
            img = im.convert("RGB")
        want = np.stack([normalise(v) for v in views(img, a.mode, a.size, a.max_tiles)])
        line = f"image {index}: {img.size[0]}x{img.size[1]} -> {tuple(got.shape)}"
        ok = got.shape == want.shape and np.array_equal(got, want)
        if not ok:
            diff = np.abs(got - want).max() if got.shape == want.shape else float("nan")
            line += f" MISMATCH against PIL (max |diff| {diff:.3g}, shapes {got.shape} vs {want.shape})"
        else:
            line += " equal to PIL"
        if hf is not None:
            ref = hf(images=img, return_tensors="np")["pixel_values"].astype(np.float32)
            same = ref.shape == got.shape and np.array_equal(ref, got)
            if not same:
                diff = np.abs(ref - got).max() if ref.shape == got.shape else float("nan")
                line += f"; MISMATCH against CLIPImageProcessor (max |diff| {diff:.3g})"
                ok = False
            else:
                line += "; equal to CLIPImageProcessor"
        bad += not ok
        print(line)
    print(f"{len(files) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

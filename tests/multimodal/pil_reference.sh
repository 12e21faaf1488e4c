#!/usr/bin/env bash
# The preprocessing reference against PIL on whole images: a generated set plus PNG and JPEG variants
# that PIL writes (grey, palette with transparency, RGBA, 16-bit, interlaced, progressive and 4:4:4
# JPEG, greyscale JPEG), preprocessed by `itera data preprocess` in crop and tiles modes, and checked
# bit for bit by scripts/multimodal_check_preprocess.py (which decodes with PIL: so the decoder's
# conversions to RGB are checked too). Skips (77) without a Python that has PIL and numpy (Debian:
# python3-pil python3-numpy).
set -euo pipefail
itera=$1 src=$2
py=""
for cand in /usr/bin/python3 python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import PIL, numpy' 2>/dev/null; then py=$cand; break; fi
done
if [ -z "$py" ]; then
  echo "SKIP: no python3 with PIL and numpy (apt-get install python3-pil python3-numpy)" >&2
  exit 77
fi
work=$(mktemp -d /tmp/itera-mm-pil.XXXXXX)
trap 'rm -rf "$work"' EXIT

"$itera" data images --out "$work/set" --sizes 224,333x500,640x480,1000x300 --count 1 --requests 4 --threads 2 >/dev/null
mkdir -p "$work/own/variants"
cp "$work"/set/images/* "$work/own/"
"$py" - "$work/own/variants" <<'PY'
import sys
import numpy as np
from PIL import Image
out = sys.argv[1]
rng = np.random.default_rng(5)
base = Image.open(sorted(__import__("glob").glob(out + "/../*_640x480.png"))[0]).convert("RGB")
small = base.resize((300, 200), Image.BICUBIC)
small.convert("L").save(out + "/grey.png")
small.convert("P", palette=Image.ADAPTIVE, colors=64).save(out + "/palette.png", transparency=3)
rgba = small.copy(); rgba.putalpha(Image.fromarray(rng.integers(0, 256, (200, 300), dtype=np.uint8))); rgba.save(out + "/rgba.png")
a16 = (np.asarray(small).astype(np.uint16) * 257 + rng.integers(0, 200, (200, 300, 3)).astype(np.uint16))
import zlib, struct
def write_png(path, arr, depth, interlace):  # PIL writes neither 16-bit RGB nor interlaced PNG
    h, w, _ = arr.shape
    enc = (lambda row: row.astype(">u2").tobytes()) if depth == 16 else (lambda row: row.astype(np.uint8).tobytes())
    passes = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)] if interlace else [(0, 0, 1, 1)]
    raw = b""
    for x0, y0, dx, dy in passes:  # Adam7: each pass a sub-image, filter type 0 on every row
        sub = arr[y0::dy, x0::dx]
        if sub.shape[0] and sub.shape[1]:
            raw += b"".join(b"\0" + enc(sub[y]) for y in range(sub.shape[0]))
    def chunk(t, d): return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, 2, 0, 0, interlace))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
write_png(out + "/rgb16.png", a16, 16, 0)
write_png(out + "/interlaced.png", np.asarray(small), 8, 1)
small.save(out + "/progressive.jpg", quality=85, progressive=True)
small.save(out + "/444.jpg", quality=92, subsampling=0)
small.convert("L").save(out + "/grey.jpg", quality=90)
PY
status=0
for mode in "crop 224" "tiles 448" "crop 336"; do
  set -- $mode
  "$itera" data preprocess "$work/own" --mode "$1" --size "$2" --out "$work/npy-$1-$2" --threads 2 >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }
  echo "== $1 $2"
  "$py" "$src/scripts/multimodal_check_preprocess.py" --images "$work/own" --npy "$work/npy-$1-$2" --mode "$1" --size "$2" || status=1
done
exit $status

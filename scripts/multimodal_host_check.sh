#!/usr/bin/env bash
# For the GPU host (16 cores; Python with PIL, numpy and transformers): the CPU decode throughput per
# thread count on the generated test set, and the preprocessing reference against PIL and
# transformers' CLIPImageProcessor. Usage: scripts/multimodal_host_check.sh ITERA_BINARY [OUT_DIR]
# Writes OUT_DIR/decode.json (itera data decode --format json) and prints the comparisons; exits
# non-zero when any image differs. What proves it: decode.json has one point per thread count
# 1, 2, 4, 8, 16 with "good": 14, "bad": 0, and each comparison ends "14 passed, 0 failed".
set -euo pipefail
itera=$1
out=${2:-$(mktemp -d /tmp/itera-mm-host.XXXXXX)}
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
[ -e "$out/set" ] || "$itera" data images --out "$out/set"
"$itera" data decode "$out/set" --passes 5
"$itera" data decode "$out/set" --passes 5 --format json >"$out/decode.json"
status=0
for mode in "crop 224 --hf" "crop 336 --hf" "tiles 448"; do
  set -- $mode
  rm -rf "$out/npy-$1-$2"
  "$itera" data preprocess "$out/set" --mode "$1" --size "$2" --out "$out/npy-$1-$2" >/dev/null
  echo "== $*"
  python3 "$src/scripts/multimodal_check_preprocess.py" --images "$out/set" --npy "$out/npy-$1-$2" --mode "$1" --size "$2" ${3:-} || status=1
done
echo "results in $out"
exit $status

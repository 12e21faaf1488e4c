#!/usr/bin/env bash
# The vision encoder's cuda engine on the GPU machine (issue 4, stages 4 and 5; docs/multimodal.md,
# "CUDA encoder"): its device tests against the cpu reference (and the llm device tests, whose
# prefill attention shares the kernel), then `itera bench vision_encoder` for ViT-L/14 at 224 px
# at batch 1, 32 and 128 (and 128 with fc1_sums=fp32), SigLIP so400m at 32, and batch 1 and 32 replayed
# as a CUDA graph.
# Builds nothing: it runs binaries built with CUDA (sm_90a) and carried as a bundle:
#   cmake -G Ninja -S . -B build-vit-cuda -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a
#   ninja -C build-vit-cuda itera itera_device_tests
#   /work/shared/tools/device-bundle bundle build-vit-cuda/itera build-vit-cuda/tests/itera_device_tests
#   (device) bash scripts/device_vit.sh bundle "$OUT"
# Writes 6 files under OUT (vit.log with everything, device_tests.txt, a .jsonl per bench) and
# prints a short table last: images/s (encode + project, and the encoder alone), the encoder GEMMs'
# TFLOP/s and their share of the bf16 GEMM ceiling measured in the same run, attention TFLOP/s, the
# normalised error against the cpu reference, and the stage table of ViT-L/14 at batch 128.
set -uo pipefail
bundle=${1:?usage: device_vit.sh BUNDLE OUT} out=${2:?usage: device_vit.sh BUNDLE OUT}
export LD_LIBRARY_PATH=$PWD/$bundle/lib:/usr/local/cuda/lib64
bin=$PWD/$bundle/bin
log=$out/vit.log
mkdir -p "$out"
section() { printf '\n===== %s =====\n' "$*" | tee -a "$log"; }
for b in itera itera_device_tests; do
  [ -x "$bin/$b" ] || { echo "missing $bin/$b: bundle it first (see the top of this script)" >&2; exit 2; }
done

section nvidia-smi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv >>"$log" 2>&1

section device tests
"$bin/itera_device_tests" --gtest_filter='vit_device*:llm_cuda*:-*timing*' >"$out/device_tests.txt" 2>&1
tests_rc=$?
cat "$out/device_tests.txt" >>"$log"
grep -E "^(features|attention|layer_norm|quick_gelu|gelu|batch|fc1|tiny|hidden)|against the bf16 reference|normalised error" \
  "$out/device_tests.txt" | head -40
passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out/device_tests.txt")
skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$out/device_tests.txt")
failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$out/device_tests.txt")
echo "device tests: ${passed:-0} passed, ${skipped:-0} skipped, ${failed:-0} failed (exit $tests_rc)" | tee -a "$log"

bench() {  # name, then itera bench arguments; the rendered tables go to the log
  local name=$1
  shift
  section "bench $name: $*"
  "$bin/itera" bench vision_encoder --out "$out/$name.jsonl" "$@" >>"$log" 2>&1
  echo "exit $?" | tee -a "$log"
}
bench clip --max-time 5 --axis preset=clip-vit-large-patch14 --axis batch=1,32,128
bench siglip --max-time 5 --axis preset=siglip-so400m-patch14-384 --axis batch=32
# The CUDA graph (launch overhead at small batches) and fc1's sums rounded to bf16 (fewer bytes
# between fc1 and its activation, a second rounding), beside the rows above.
bench graph --no-ceilings --max-time 5 --axis preset=clip-vit-large-patch14 --axis batch=1,32 --axis graph=yes \
  --axis check_images=0
bench fc1 --max-time 5 --axis preset=clip-vit-large-patch14 --axis batch=128 --axis fc1_sums=fp32

section summary
python3 - "$out" <<'PY' | tee -a "$log"
import glob, json, os, sys
out = sys.argv[1]
rows, ceiling, stage_case = [], None, None
for name in ("clip", "siglip", "graph", "fc1"):
    path = os.path.join(out, name + ".jsonl")
    if not os.path.exists(path):
        continue
    for line in open(path):
        j = json.loads(line)
        if j.get("type") == "ceiling" and j.get("key") == "gemm.bf16":
            ceiling = j["value"]
        if j.get("type") != "case" or j.get("workload") != "vision_encoder":
            continue
        a, m = j["axes"], {x["name"]: x["value"] for x in j.get("metrics", [])}
        v = j.get("verification", {})
        rows.append((a, j["status"], j.get("message", ""), m, v))
        if a.get("preset") == "clip-vit-large-patch14" and a.get("batch") == "128" and a.get("fc1_sums", "bf16") == "bf16" \
                and j.get("stages") and j["status"] == "ok":
            stage_case = j
def f(x, scale=1.0, fmt="{:.1f}"):
    return "-" if x is None else fmt.format(x * scale)
print(f"bf16 GEMM ceiling measured in this run: {f(ceiling, 1e-12)} TFLOP/s (DESIGN.md: 771)")
print()
print("| preset | batch | graph | fc1 sums | status | images/s | encoder alone, images/s | encoder GEMM TFLOP/s | % of bf16 ceiling | attention TFLOP/s | GEMM share of time | error vs cpu (tolerance) |")
print("| --- | --: | --- | --- | --- | --: | --: | --: | --: | --: | --: | --- |")
for a, status, message, m, v in rows:
    gemm = m.get("throughput/encoder_gemm_flops")
    share = m.get("utilisation/encoder_gemm/gemm.bf16")
    if share is None and gemm is not None and ceiling:
        share = gemm / ceiling
    err = "-" if not v.get("checked") else f"{v.get('error') if v.get('error') is not None else float('inf'):.2e} ({v.get('tolerance'):.0e}, {'passed' if v.get('passed') else 'FAILED'})"
    print(f"| {a['preset']} | {a['batch']} | {a.get('graph', 'no')} | {a.get('fc1_sums', 'bf16')} | {status} | {f(m.get('throughput/images_per_s'), 1, '{:.0f}')} | {f(m.get('throughput/encoder_images_per_s'), 1, '{:.0f}')} | "
          f"{f(gemm, 1e-12)} | {f(share, 100)} | {f(m.get('throughput/attention_flops'), 1e-12)} | "
          f"{f(m.get('time/encoder_gemm_share'), 100, '{:.0f}%')} | {err} |")
    if status != "ok":
        print(f"|   {message[:200]} |")
if stage_case:
    reps = len(stage_case["samples"]["device_ns"]) if "samples" in stage_case else 1
    median = stage_case["stats"]["device"]["median"]
    print()
    print(f"clip-vit-large-patch14, batch 128, per repetition (median {median * 1e-6:.2f} ms):")
    print("| stage | calls | device ms | share | TFLOP/s |")
    print("| --- | --: | --: | --: | --: |")
    for st in stage_case["stages"]:
        dev = st.get("device_ns", -1)
        if dev < 0:
            continue
        t = dev / reps
        rate = st.get("flops", 0) / dev * 1e9 * 1e-12 if dev > 0 else 0
        print(f"| {st['path']} | {st['calls'] // reps} | {t * 1e-6:.3f} | {100 * t / median:.1f}% | {rate:.0f} |")
print()
print("target (issue 4): clip-vit-large-patch14 at batch 128 >= 3400 images/s, encoder GEMMs >= 70% of the ceiling")
PY

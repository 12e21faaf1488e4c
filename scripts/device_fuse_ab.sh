#!/usr/bin/env bash
# The llm decode step's fused products on the GPU machine, A/B against the unfused
# step (docs/perf/2026-11-30-decode-fusion.md): every device test but the timings, then the
# decode timing test's stage tables under each setting.
#   (device) bash scripts/device_fuse_ab.sh   (bundle/ from ../shared/tools/device-bundle)
export LD_LIBRARY_PATH=$PWD/bundle/lib:/usr/local/cuda/lib64
B=$PWD/bundle/bin
mkdir -p "$OUT"
if [ -z "${ITERA_AB_SKIP_TESTS:-}" ]; then
  "$B/itera_device_tests" --gtest_filter='-*timing*' >"$OUT/device_tests.txt" 2>&1
  echo "device tests rc=$?"
  grep -E "FAILED|Failure|PASSED" "$OUT/device_tests.txt" | head -20
fi
run() {  # fused (ITERA_LLM_FUSED_GEMV), batch, weights
  echo "=== fused=$1 batch=$2 weights=$3" >>"$OUT/timing.txt"
  ITERA_LLM_FUSED_GEMV=$1 ITERA_LLM_TIMING_BATCH=$2 ITERA_LLM_TIMING_WEIGHTS=$3 \
    "$B/itera_device_tests" --gtest_filter='*decode_timing*' 2>&1 | grep -E "ms/step|stage|^  " >>"$OUT/timing.txt"
  echo "fused=$1 batch=$2 $3: $(grep -E 'CUDA graph' "$OUT/timing.txt" | tail -1 | sed 's/.*CUDA graph: //')"
}
for weights in bf16 fp8_e4m3; do
  run 0 1 "$weights"
  run 1 1 "$weights"
done
run 0 2 bf16
run 1 2 bf16
run 1 4 bf16
run 1 64 bf16

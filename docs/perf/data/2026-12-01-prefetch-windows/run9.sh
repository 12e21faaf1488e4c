#!/usr/bin/env bash
# Session 2026-12-01 (eighteenth), run 9: run 8's failure under the poison, by path: as built,
# launches blocking, the fp8 cuBLASLt products off, the one-kernel step off, the fused gemv off;
# three times each; the prefill's logits against the reference printed (DEBUG line).
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
t() {  # label [env...]
  local label=$1; shift
  env "$@" ITERA_TEST_POISON=1 timeout 60 $B/itera_device_tests --gtest_filter='llm_fused_gemv.engine_batch_1*' > /tmp/t.log 2>&1
  { echo "== $label"; cat /tmp/t.log; } >> $OUT/run9_tests.log
  echo "$label: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' /tmp/t.log | tr '\n' ' ') prefill: $(grep DEBUG /tmp/t.log | awk '{print $5}' | tr '\n' ' ') bad: $(grep 'decode step 1:' /tmp/t.log | grep -v 'error 0\.0' | sed 's/ compute, fp8_e4m3 weights, batch 1 decode step 1: logits normalised error/:/; s/(tolerance.*//' | tr '\n' ';')"
}
for i in 1 2 3; do
  t "as built $i"
  t "blocking $i" CUDA_LAUNCH_BLOCKING=1
  t "fp8 products off $i" ITERA_LLM_FP8_PRODUCTS=0
  t "step off $i" ITERA_LLM_DECODE_STEP=0
  t "fused gemv off $i" ITERA_LLM_FUSED_GEMV=0
done

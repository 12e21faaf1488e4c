#!/usr/bin/env bash
# Session 2026-12-01 (twenty-first), run 3: run 2 with 64-row tiles at most 64 rows (one consumer warpgroup, five stages) besides the 112-column tiles
# (128 tiles for llama's 14336 on 132 SMs) and down split when it runs: correctness (fused-products
# test; the llm device tests with the fused kernel from 2 rows), then the decode timing test's graph
# step at batch 64 (and 32, 16) with cuBLASLt + SwiGLU (off) against the fused kernel (on), alternating.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 120 $B/itera_device_tests --gtest_filter='*fused_products*' > $OUT/run3_fused_test.log 2>&1
echo "fused products test rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|Failure|error" $OUT/run3_fused_test.log | head
ITERA_LLM_FUSED_GATE_UP=2 timeout 200 $B/itera_device_tests --gtest_filter="*llm_cuda*:-*decode_timing*:*search*:*decode_step*" > $OUT/run3_llm_tests_fused.log 2>&1
echo "llm tests (fused from 2 rows) rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/run3_llm_tests_fused.log | head
t() {  # batch, variant
  if [ $2 = on ]; then export ITERA_LLM_FUSED_GATE_UP=$1; else unset ITERA_LLM_FUSED_GATE_UP; fi
  ITERA_LLM_TIMING_BATCH=$1 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/t.log 2>&1
  cat $OUT/t.log >> $OUT/run3_timing_all.log
  step=$(grep -oE "CUDA graph: [0-9.]+ ms/step" $OUT/t.log | grep -oE "[0-9.]+")
  k=$(sed -n '/graph step by kernel/,/in order/p' $OUT/t.log | grep -E "gate_up|fused_product|nvjet_sm90_tst_112|swiglu|rms_norm|nvjet" | awk '{printf "%s=%s ", substr($1,1,28), $3}')
  echo "b$1 $2: $step ms | $k"
}
unset ITERA_LLM_FUSED_GATE_UP
for r in 1 2 3 4; do for v in off on; do t 64 $v; done; done
for b in 32 16; do for v in off on off on; do t $b $v; done; done

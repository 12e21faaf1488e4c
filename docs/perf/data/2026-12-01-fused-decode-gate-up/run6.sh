#!/usr/bin/env bash
# Session 2026-12-01 (twenty-first), run 6 (run 7: batch 5 and 256, the same script): where else the fused gate/up pays: batch 8 (64-row
# tiles) and 128 (128-row tiles, four stages), graph steps with cuBLASLt + SwiGLU (off) against the
# fused kernel (on), alternating.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
t() {  # batch, variant
  if [ $2 = on ]; then export ITERA_LLM_FUSED_GATE_UP=$1; else export ITERA_LLM_FUSED_GATE_UP=0; fi
  ITERA_LLM_TIMING_BATCH=$1 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/t.log 2>&1
  cat $OUT/t.log >> $OUT/run6_timing_all.log
  step=$(grep -oE "CUDA graph: [0-9.]+ ms/step" $OUT/t.log | grep -oE "[0-9.]+")
  k=$(sed -n '/graph step by kernel/,/in order/p' $OUT/t.log | grep -E "fused_product|swiglu|nvjet" | head -4 | awk '{printf "%s=%s ", substr($1,1,28), $3}')
  echo "b$1 $2: $step ms | $k"
}
for b in 8 128; do for v in off on off on off on; do t $b $v; done; done

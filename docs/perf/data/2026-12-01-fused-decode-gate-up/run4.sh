#!/usr/bin/env bash
# Session 2026-12-01 (twenty-first), run 4: the decode's bias, RoPE and cache store inside the
# tensor-core attention kernel (ITERA_LLM_ROPE_IN_ATTENTION), with the fused gate/up at 16-64 rows
# now the default: the llm device tests (the new rope_in_decode_attention test among them), then
# graph steps with the RoPE kernel (off) against without (on), alternating, batch 64, 16 and 2.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 300 $B/itera_device_tests --gtest_filter='*llm*:-*decode_timing*:*search*' > $OUT/run4_llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|RoPE in the decode" $OUT/run4_llm_tests.log | head -20
t() {  # batch, variant
  if [ $2 = on ]; then unset ITERA_LLM_ROPE_IN_ATTENTION; else export ITERA_LLM_ROPE_IN_ATTENTION=0; fi
  ITERA_LLM_TIMING_BATCH=$1 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/t.log 2>&1
  cat $OUT/t.log >> $OUT/run4_timing_all.log
  step=$(grep -oE "CUDA graph: [0-9.]+ ms/step" $OUT/t.log | grep -oE "[0-9.]+")
  k=$(sed -n '/graph step by kernel/,/in order/p' $OUT/t.log | grep -E "attention|rope|fused_product" | awk '{printf "%s=%s ", substr($1,1,28), $3}')
  echo "b$1 $2: $step ms | $k"
}
for r in 1 2 3 4; do for v in off on; do t 64 $v; done; done
for b in 16 2; do for v in off on off on; do t $b $v; done; done

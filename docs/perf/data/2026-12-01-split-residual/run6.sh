#!/usr/bin/env bash
# Session 2026-12-01 (sixteenth), run 6: the tensor-core decode attention with a row's keys dealt
# over a cluster of 1-8 blocks. The llm device tests (the decode kernels at batch 2, 16, 64, 150);
# stage tables at batch 4, 8, 16, 32 with ITERA_LLM_WIDE_SPLITS=1, 2, 4, 8; batch 2 on the wide
# kernel (ITERA_LLM_WIDE_DECODE_PAIRS=1, 8 splits) against the default; batch 64 at the rule.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 240 $B/itera_device_tests --gtest_filter='llm*:-*timing*' > $OUT/run6_llm_tests.log 2>&1; echo "llm tests rc=$?"; tail -2 $OUT/run6_llm_tests.log; grep -E "^\[  FAILED" $OUT/run6_llm_tests.log | head
grep -E "batch (16|64), decode step 2" $OUT/run6_llm_tests.log | head -20
st() { grep -E "CUDA graph|/attention " "$1" | sed 's/llama-3.1-8b bf16 decode, bf16 compute, bf16 KV cache, //'; }
one() {  # label, env...
  local label=$1; shift
  env "$@" timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== $label"; cat /tmp/t.log; } >> $OUT/run6_stages.log
  echo "== $label"; st /tmp/t.log
}
for b in 32 16 8 4; do
  for sp in 1 2 4 8; do one "batch $b splits $sp" ITERA_LLM_WIDE_SPLITS=$sp ITERA_LLM_TIMING_BATCH=$b; done
  one "batch $b rule" ITERA_LLM_TIMING_BATCH=$b
done
one "batch 2 wide, 8 splits" ITERA_LLM_WIDE_DECODE_PAIRS=1 ITERA_LLM_WIDE_SPLITS=8 ITERA_LLM_TIMING_BATCH=2
one "batch 2 default" ITERA_LLM_TIMING_BATCH=2
one "batch 64 rule" ITERA_LLM_TIMING_BATCH=64

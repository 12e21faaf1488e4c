#!/usr/bin/env bash
# Session 2026-12-01 (sixteenth), run 4: the tensor-core (wide) decode attention below one
# (row, kv head) pair per SM (ITERA_LLM_WIDE_DECODE_PAIRS=1 against the default 132) at batch 4, 8
# and 16; PDL on our kernels at batch 64 (ITERA_LLM_PDL=1 against off). Alternating, two each.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
st() { grep -E "CUDA graph|/attention |/rope" "$1" | sed 's/llama-3.1-8b bf16 decode, bf16 compute, bf16 KV cache, //'; }
one() {  # label, env...
  local label=$1; shift
  env "$@" timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== $label"; cat /tmp/t.log; } >> $OUT/run4_stages.log
  echo "== $label"; st /tmp/t.log
}
for b in 16 8 4; do
  for rep in 1 2; do
    one "batch $b wide from 1 pair" ITERA_LLM_WIDE_DECODE_PAIRS=1 ITERA_LLM_TIMING_BATCH=$b
    one "batch $b default" ITERA_LLM_TIMING_BATCH=$b
  done
done
for rep in 1 2; do
  one "batch 64 PDL" ITERA_LLM_PDL=1 ITERA_LLM_TIMING_BATCH=64
  one "batch 64 no PDL" ITERA_LLM_TIMING_BATCH=64
done

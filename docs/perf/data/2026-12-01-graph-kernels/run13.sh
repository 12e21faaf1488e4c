#!/usr/bin/env bash
# run 13: the per-kernel table of CUDA graph replays (batch 64, 16, 1 bf16; fp8 batch 1).
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for cfg in "64 bf16" "16 bf16" "1 bf16" "1 fp8_e4m3"; do
  set -- $cfg
  ITERA_LLM_TIMING_BATCH=$1 ITERA_LLM_TIMING_WEIGHTS=$2 timeout 150 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run13_b$1_$2.log 2>&1
  echo "=== batch $1 $2 rc=$?"; grep -E "CUDA graph:|eager launches:" $OUT/run13_b$1_$2.log | sed 's/llama-3.1-8b //'
  sed -n '/graph step by kernel/,/decode step by stage/p' $OUT/run13_b$1_$2.log | grep -v "decode step by stage" | head -75
done

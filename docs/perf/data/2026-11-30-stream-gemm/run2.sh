#!/usr/bin/env bash
# run 2: x's box trimmed to the tokens (16-row steps), up to 64 stages; A/B at batch 8, 16, 32, 64
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 120 $B/itera_device_tests --gtest_filter='llm_stream_gemm.*' > $OUT/sg_test.log 2>&1; echo "stream test rc=$?"
grep -E "OK \]|FAILED|Failure|Expected|Which|normalised" $OUT/sg_test.log | head -30
f=$OUT/timing.log
for b in 16 8 32 64; do for v in 1 0; do
  echo "=== batch $b stream $v" >> $f
  ITERA_LLM_TIMING_BATCH=$b ITERA_LLM_STREAM_GEMM=$v timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  echo "b$b stream=$v: $(grep 'CUDA graph' $f | tail -1 | sed -E 's/.*context ~[0-9]+, //')"
done; done
awk '/=== /{print} /qkv |o_proj|gate_up |down |lm_head |sum of/' $f

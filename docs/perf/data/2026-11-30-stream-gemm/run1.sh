#!/usr/bin/env bash
# run 1: stream_gemm correctness, the device tests, decode A/B at batch 64 and 16 (stream 1 vs cuBLASLt 0)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 120 $B/itera_device_tests --gtest_filter='llm_stream_gemm.*' > $OUT/sg_test.log 2>&1; echo "stream test rc=$?"
grep -E "OK|FAILED|error|Failure|Expected|Which|normalised" $OUT/sg_test.log | head -30
for r in 1 2; do for b in 64 16; do for v in 1 0; do
  f=$OUT/timing.log
  echo "=== round $r batch $b stream $v" >> $f
  ITERA_LLM_TIMING_BATCH=$b ITERA_LLM_STREAM_GEMM=$v timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  echo "r$r b$b stream=$v: $(grep 'CUDA graph' $f | tail -1 | sed -E 's/.*context ~[0-9]+, //')"
done; done; done
timeout 300 $B/itera_device_tests --gtest_filter='-*timing*' > $OUT/device_tests.log 2>&1; echo "device tests rc=$?"
tail -3 $OUT/device_tests.log; grep -E "^\[  FAILED" $OUT/device_tests.log | head
# stage tables of round 2
awk '/=== round 2/{p=1} p && /=== |qkv|o_proj|gate_up|down|lm_head|attention |sum of/' $OUT/timing.log

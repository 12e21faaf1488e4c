#!/usr/bin/env bash
# run 12: rms_norm at 256 threads a row and SwiGLU with four items a thread, against head (5d73c47)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
f=$OUT/prefill.log
for r in 1 2; do for v in head new; do
  echo "=== round $r $v" >> $f
  ITERA_LLM_PREFILL_TOKENS=2048 timeout 100 $B/dt_$v --gtest_filter='*prefill_timing*' >> $f 2>&1
  echo "r$r $v: $(grep 'per call' $f | tail -1 | sed -E 's/.*compute: //') | $(grep -E '/norm |/swiglu |/rope |sum of' $f | tail -4 | awk '{printf "%s %s; ", $1, $3}')"
done; done
for v in head new; do
  ITERA_LLM_TIMING_BATCH=64 timeout 100 $B/dt_$v --gtest_filter='*decode_timing_llama*' > $OUT/decode_b64_$v.log 2>&1
  echo "b64 $v: $(grep 'CUDA graph' $OUT/decode_b64_$v.log | sed -E 's/.*context ~[0-9]+, //') | $(grep -E '/norm |/swiglu ' $OUT/decode_b64_$v.log | awk '{printf "%s %s; ", $1, $3}')"
done
timeout 300 $B/dt_new --gtest_filter='llm*:-*timing*' > $OUT/llm_tests_new.log 2>&1; echo "llm tests new rc=$?"; tail -2 $OUT/llm_tests_new.log; grep -E "^\[  FAILED" $OUT/llm_tests_new.log | head

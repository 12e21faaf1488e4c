#!/usr/bin/env bash
# decode attention: the outputs stored after the second cluster barrier. llm tests, then b1 timing A/B
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
N=$PWD/bb/bin/itera_device_tests; O=$PWD/bb/bin/dt_old
timeout 240 $N --gtest_filter='llm*:-*timing*' >$OUT/tests_llm.log 2>&1
echo "llm device tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/tests_llm.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/tests_llm.log | head
t() { timeout 120 $1 --gtest_filter='*decode_timing_llama*' >$OUT/timing_$2.log 2>&1; echo "$2: $(grep -E 'CUDA graph' $OUT/timing_$2.log | sed 's/.*context ~[0-9]*, //') | $(grep -E '^ +(layers/)?attention ' $OUT/timing_$2.log | head -1)"; }
for r in a b; do t $O old_$r; t $N new_$r; done
export ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3
t $O fp8old; t $N fp8new
grep -A24 "decode step by stage" $OUT/timing_new_a.log | head -26
grep -A24 "decode step by stage" $OUT/timing_old_a.log | grep -i attention

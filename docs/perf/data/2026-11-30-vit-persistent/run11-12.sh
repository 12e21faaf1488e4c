#!/usr/bin/env bash
# fp8 tensor-core gemv: U=3 at 3 blocks/SM against U=4 at 2 (stage tables), plus the fp8 gemv tests
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
N=$PWD/bb/bin/itera_device_tests; O=$PWD/bb/bin/dt_u3
timeout 200 $N --gtest_filter='llm_fused_gemv*' >$OUT/tests.log 2>&1
echo "tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/tests.log | tr '\n' ' ')"
export ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3
t() { timeout 120 $1 --gtest_filter='*decode_timing_llama*' >$OUT/timing_$2.log 2>&1; echo "$2: $(grep -E 'CUDA graph' $OUT/timing_$2.log | sed 's/.*context ~[0-9]*, //') | $(grep -A16 'decode step by stage' $OUT/timing_$2.log | grep -E 'qkv|o_proj|gate_up|down' | awk '{print $1, $3}' | tr '\n' ' ')"; }
for r in a b; do t $N u2_$r; t $O u3_$r; done

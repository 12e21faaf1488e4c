#!/usr/bin/env bash
# fp8 products on tensor cores: every device test, then decode timing A/B (ITERA_LLM_FP8_MMA_GEMV)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
N=$PWD/bb/bin/itera_device_tests
timeout 300 $N --gtest_filter="llm*" >$OUT/device_tests.log 2>&1
echo "device tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/device_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/device_tests.log | head -20
grep -E "fp8 on tensor cores" $OUT/device_tests.log | awk '{print $NF, $0}' | sort -g | tail -3 | cut -c1-200
t() { timeout 120 $N --gtest_filter='*decode_timing_llama*' >$OUT/timing_$1.log 2>&1; echo "$1: $(grep -E 'CUDA graph' $OUT/timing_$1.log | sed 's/.*context ~[0-9]*, //')"; }
export ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3
for r in a b; do ITERA_LLM_FP8_MMA_GEMV=1 t fp8_mma_$r; ITERA_LLM_FP8_MMA_GEMV=0 t fp8_cc_$r; done
for b in 2; do ITERA_LLM_TIMING_BATCH=$b ITERA_LLM_FP8_MMA_GEMV=1 t fp8_mma_b$b; ITERA_LLM_TIMING_BATCH=$b ITERA_LLM_FP8_MMA_GEMV=0 t fp8_cc_b$b; done
unset ITERA_LLM_TIMING_WEIGHTS
t bf16_a
for f in fp8_mma_a fp8_cc_a; do echo "== $f"; grep -A16 "decode step by stage" $OUT/timing_$f.log | grep -E "qkv|o_proj|gate_up|down|swiglu|sum of"; done

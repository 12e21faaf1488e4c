#!/usr/bin/env bash
# Session 22, call 5, on 615a925's code: do the four llm tests that failed under ITERA_LLM_PDL=1 in
# run 3 (with that run's early loads) fail under ITERA_LLM_PDL=1 without them?
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
ITERA_LLM_PDL=1 timeout 150 bb/bin/itera_device_tests --gtest_filter='llm_cuda.rope_in_decode_attention_matches_cpu_reference:llm_cuda.fp8_kv_cache_decode_kernels_match_cpu_reference:llm_cuda.fp16_decode_kernels_match_cpu_reference:llm_decode_step.matches_per_layer_kernels_and_cpu_reference' > $OUT/pdl1_tests.log 2>&1
echo "rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|OK \]" $OUT/pdl1_tests.log | head
grep -E "Failure|Expected|Which is|error" $OUT/pdl1_tests.log | head -12

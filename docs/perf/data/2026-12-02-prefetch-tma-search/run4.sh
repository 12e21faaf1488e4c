#!/usr/bin/env bash
# Session 23, call 4: cuBLASLt's candidates for the 2048-token prefill's products (the engine runs
# the heuristic's first there; qkv and gate/up are its own fused kernels at 2048 tokens, o_proj and
# down cuBLASLt's), and the prefill's stage table as it stands; then the NaN-past-the-keys test.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
ITERA_LLM_PRODUCTS_SEARCH=1 ITERA_LLM_SEARCH_TOKENS=2048 timeout 200 bb/bin/itera_device_tests \
  --gtest_filter='llm_products_timing.batch64_cublaslt_search' > $OUT/search2048.log 2>&1
echo "search rc=$?"
ITERA_LLM_PREFILL_TOKENS=2048 timeout 90 bb/bin/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/prefill_table.log 2>&1
echo "prefill table rc=$?"
timeout 60 bb/bin/itera_device_tests --gtest_filter='llm_decode_attention.*' > $OUT/nan_test.log 2>&1
echo "nan test rc=$?"; grep -E "normalised error|^\[  (PASSED|FAILED) " $OUT/nan_test.log
grep -E "candidates|heuristic's first|^ +[0-9]+ " $OUT/search2048.log | grep -E "candidates|<-|^ +[1-3] " 
grep -iE "stage|ms|qkv|o_proj|down|gate|attention|norm" $OUT/prefill_table.log | tail -30

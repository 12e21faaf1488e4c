#!/usr/bin/env bash
# Session 23, call 1, on f429eb4: last session's compiled-not-run changes. The llm and ViT device
# tests with ITERA_LLM_PDL=1 (the prefill attention's missing wait, 9f11a7e), every device test
# without it (the review's mends, the RoPE-in-attention shapes), the batch-64 graph table.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
ITERA_LLM_TIMING_BATCH=64 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/b64_timing.log 2>&1
grep -E "CUDA graph:" $OUT/b64_timing.log; sed -n '/graph step by kernel/,/in order/p' $OUT/b64_timing.log | head -14
ITERA_LLM_PDL=1 timeout 240 $B/itera_device_tests --gtest_filter='llm_*:vit_*:-llm_products_timing.*:*_timing_*' > $OUT/pdl1_tests.log 2>&1
echo "pdl1 tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $OUT/pdl1_tests.log | head
timeout 300 $B/itera_device_tests > $OUT/device_tests.log 2>&1
echo "device tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $OUT/device_tests.log | head
gzip $OUT/*.log

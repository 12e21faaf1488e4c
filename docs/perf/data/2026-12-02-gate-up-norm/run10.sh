#!/usr/bin/env bash
# Session 27, call 10 (final read): the normalising gate/up's empty barrier indexed by g % stages
# rather than derived from the stage's address: its kernel and engine tests, and one batch-64
# graph step.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 120 $B/itera_device_tests --gtest_filter='llm_fused_products.*:llm_decode_fusions.*' > $OUT/tests.log 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED" $OUT/tests.log
ITERA_LLM_TIMING_BATCH=64 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/t.log 2>&1
grep -oE "CUDA graph: [0-9.]+ ms" $OUT/t.log; grep -E "fused_product_kernel|rms_norm_kernel" $OUT/t.log | head -2

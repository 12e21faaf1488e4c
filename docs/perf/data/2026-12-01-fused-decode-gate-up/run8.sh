#!/usr/bin/env bash
# Session 2026-12-01 (twenty-first), run 8: the final rule (the fused gate/up wherever cuBLASLt would
# run it, from 5 rows) with RoPE in the decode attention: the llm device tests.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 280 $B/itera_device_tests --gtest_filter='*llm*:-*decode_timing*:*search*' > $OUT/run8_llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/run8_llm_tests.log | head -20

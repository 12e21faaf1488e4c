#!/usr/bin/env bash
# session 8, run 13: the decode_step test with the wide shape's two cases, every llm device test
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 300 $B/itera_device_tests --gtest_filter='llm*:-*timing*' >$OUT/llm_tests.log 2>&1
echo "llm device tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/llm_tests.log | tr '\n' ' ')"
grep -E "^\[ +(OK|FAILED) |Failure|Expected|Which is" $OUT/llm_tests.log | head -40

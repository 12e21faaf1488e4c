#!/usr/bin/env bash
# run 8 (the review's mend: the search test on the backend's device buffers; spec.fp8 read directly):
# the products search, the fp8 weights and checkpoint device tests
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
ITERA_LLM_PRODUCTS_SEARCH=1 timeout 100 $B/itera_device_tests --gtest_filter='*products_timing*' > $OUT/search.log 2>&1; echo "search rc=$?"; grep -E "candidates|first on one copy|PASSED|FAILED" $OUT/search.log
timeout 150 $B/itera_device_tests --gtest_filter='*fp8*:*checkpoint*' > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -1 $OUT/tests.log; grep -E "^\[  FAILED" $OUT/tests.log | head

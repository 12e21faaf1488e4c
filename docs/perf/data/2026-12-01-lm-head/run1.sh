#!/usr/bin/env bash
# run 1 (f3200d9 + the products search test): every device test (the RoPE mend's first GPU run),
# then the batch-64 cuBLASLt search (heuristic candidates with split-K 2/4/8 forced)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
ITERA_LLM_PRODUCTS_SEARCH=1 timeout 200 $B/itera_device_tests --gtest_filter='*products_timing*' > $OUT/search.log 2>&1; echo "search rc=$?"
timeout 300 $B/itera_device_tests --gtest_filter='-*timing*' > $OUT/device_tests.log 2>&1; echo "device tests rc=$?"; tail -2 $OUT/device_tests.log; grep -E "^\[  FAILED" $OUT/device_tests.log | head
grep -vE "^\[ RUN|^\[       OK" $OUT/search.log | tail -60

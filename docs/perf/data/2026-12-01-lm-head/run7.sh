#!/usr/bin/env bash
# run 7 (the session's final code, 3a3de84: the L2 prefetch reverted): every device test
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 330 $B/itera_device_tests --gtest_filter='-*timing*' > $OUT/device_tests.log 2>&1; echo "device tests rc=$?"; tail -2 $OUT/device_tests.log; grep -E "^\[  FAILED" $OUT/device_tests.log | head

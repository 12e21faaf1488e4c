#!/usr/bin/env bash
# run 11: argmax split by rows (final code): its test with 20-70 rows, the device tests, batch-64 step
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 100 $B/itera_device_tests --gtest_filter='*argmax*' > $OUT/argmax_test.log 2>&1; echo "argmax test rc=$? $(grep -E 'PASSED|FAILED' $OUT/argmax_test.log | tail -1)"
ITERA_LLM_TIMING_BATCH=64 timeout 100 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/decode_b64.log 2>&1
grep -E "CUDA graph|^  argmax" $OUT/decode_b64.log
timeout 400 $B/itera_device_tests --gtest_filter='-*timing*' > $OUT/device_tests.log 2>&1; echo "device tests rc=$?"; tail -3 $OUT/device_tests.log; grep -E "^\[  FAILED" $OUT/device_tests.log | head

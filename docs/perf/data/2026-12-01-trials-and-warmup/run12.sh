#!/usr/bin/env bash
# Session 2026-12-01 (seventeenth), run 12: the prepared-graphs test as mended (run 11: it staged
# more prompts than its engine's prefill batch of 1 takes), with the slots and fusion tests.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
timeout 100 bb/bin/itera_device_tests --gtest_filter='*prepared_decode*:*slots_serve*:*decode_fusions*' > $OUT/run12_tests.log 2>&1; echo "tests rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|ran\." $OUT/run12_tests.log

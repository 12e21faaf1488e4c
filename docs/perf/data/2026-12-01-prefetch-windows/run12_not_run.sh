#!/usr/bin/env bash
# Session 2026-12-01 (eighteenth), run 12 (not run: the device time was spent; the next session's
# first call, on the final commit): every device test (the new test's fp8 tolerance, the mends
# after run 11: the layer table's upload outside the stage scope, the trace's zeroed buffers, the
# stream-ordered test upload), then the benches. Bundle build/itera and
# build/tests/itera_device_tests into bb.tgz (carry it).
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 300 $B/itera_device_tests > $OUT/run12_all_tests.log 2>&1; echo "device tests rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED" $OUT/run12_all_tests.log
for i in 1 2 3; do
  timeout 60 $B/itera_device_tests --gtest_filter='llm_fused_gemv.first_prefill*' > /tmp/t.log 2>&1
  echo "first prefill $i: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' /tmp/t.log | tr '\n' ' ')"
done
timeout 240 $B/itera bench llm --max-time 10 -a prompt=2048 -a output=1 -o $OUT/run12_prefill.jsonl > $OUT/run12_prefill.md 2>&1; echo "prefill rc=$?"
timeout 300 $B/itera bench llm --max-time 10 -a batch=1,64 -a weights=bf16,fp8_e4m3 -o $OUT/run12_decode.jsonl > $OUT/run12_decode.md 2>&1; echo "decode rc=$?"

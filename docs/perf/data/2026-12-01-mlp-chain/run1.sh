#!/usr/bin/env bash
# Session 2026-12-01 (nineteenth), run 1 (the eighteenth session's run12_not_run.sh, run as this
# session's first call on d8998e0, plus the batch-64 stage table): every device test (the new test's fp8 tolerance, the mends
# after run 11: the layer table's upload outside the stage scope, the trace's zeroed buffers, the
# stream-ordered test upload), then the benches. Bundle build/itera and
# build/tests/itera_device_tests into bb.tgz (carry it).
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 300 $B/itera_device_tests > $OUT/run1_all_tests.log 2>&1; echo "device tests rc=$?"; grep -E "^\[  PASSED|^\[  FAILED|^\[  SKIPPED" $OUT/run1_all_tests.log
for i in 1 2 3; do
  timeout 60 $B/itera_device_tests --gtest_filter='llm_fused_gemv.first_prefill*' > /tmp/t.log 2>&1
  echo "first prefill $i: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' /tmp/t.log | tr '\n' ' ')"
done
timeout 240 $B/itera bench llm --max-time 10 -a prompt=2048 -a output=1 -o $OUT/run1_prefill.jsonl > $OUT/run1_prefill.md 2>&1; echo "prefill rc=$?"
timeout 300 $B/itera bench llm --max-time 10 -a batch=1,64 -a weights=bf16,fp8_e4m3 -o $OUT/run1_decode.jsonl > $OUT/run1_decode.md 2>&1; echo "decode rc=$?"
ITERA_LLM_TIMING_BATCH=64 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run1_stages64.log 2>&1; echo "stages rc=$?"
grep -E "graph|step" $OUT/run1_stages64.log | tail -5
tail -30 $OUT/run1_decode.md

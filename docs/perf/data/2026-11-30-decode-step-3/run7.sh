#!/usr/bin/env bash
# session 9, run 7: the commit's device tests (all 62 but timing) and the bench at batch 1
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 300 $B/itera_device_tests --gtest_filter='-*timing*' >$OUT/device_tests.log 2>&1
echo "device tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/device_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure|logits one kernel" $OUT/device_tests.log | head -20
timeout 150 $B/itera bench llm --max-time 15 --axis batch=1 --axis weights=bf16,fp8_e4m3 --out $OUT/bench.jsonl >$OUT/bench.log 2>&1
echo "bench rc $?"; grep -E "^\| (bf16|fp8)" $OUT/bench.log | head -2 | awk -F'|' '{print $2, "tpot", $29, "decode tok/s", $30, "GB/s", $31, "% copy", $32, "logits err", $34, "top1", $35}'

#!/usr/bin/env bash
# session 8, run 16: the last commit's llm device tests and the bench at batch 1
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 200 $B/itera_device_tests --gtest_filter='llm*:-*timing*' >$OUT/llm_tests.log 2>&1
echo "llm device tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/llm_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/llm_tests.log | head
timeout 150 $B/itera bench llm --max-time 15 --axis batch=1 --axis weights=bf16,fp8_e4m3 --out $OUT/bench.jsonl >$OUT/bench.log 2>&1
echo "bench rc $?"; grep -E "^\| (bf16|fp8)" $OUT/bench.log | head -2 | awk -F'|' '{print $2, "tpot", $29, "decode tok/s", $30, "GB/s", $31, "% copy", $32, "logits err", $34, "top1", $35}'

#!/usr/bin/env bash
# the session's last commit (363fcbd): every device test, decode timing one kernel against per-layer, the bench at batch 1
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 200 $B/itera_device_tests --gtest_filter='-*timing*' >$OUT/device_tests.log 2>&1
echo "device tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/device_tests.log | tr '\n' ' ')"
grep -E "logits one kernel|^\[  FAILED|Failure" $OUT/device_tests.log | head -20
ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=bf16 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >$OUT/trace_bf16.log 2>&1
t() { ITERA_LLM_DECODE_STEP=$1 ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >>$OUT/timing.log 2>&1
  echo "$3 step=$1 $2: rc $? $(grep -E 'CUDA graph' $OUT/timing.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in a b; do t 1 bf16 $r; t 0 bf16 $r; done
ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_DECODE_STEP_FP8=1 ITERA_LLM_TIMING_WEIGHTS=fp8_e4m3 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter="*decode_timing_llama*" >$OUT/trace_fp8.log 2>&1
timeout 200 $B/itera bench llm --max-time 20 --axis batch=1 --axis weights=bf16,fp8_e4m3 --out $OUT/bench.jsonl >$OUT/bench.log 2>&1
echo "bench rc $?"; grep -E "^\| (bf16|fp8)" $OUT/bench.log | awk -F'|' '{print $2, "tpot", $29, "decode tok/s", $30, "GB/s", $31, "% copy", $32, "logits err", $34, "top1", $35, "note", $38}'

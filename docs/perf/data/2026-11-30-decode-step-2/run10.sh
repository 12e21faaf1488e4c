#!/usr/bin/env bash
# session 8, run 10b (the device tests ran in run 10: 61 passed): decode timing one kernel against per-layer (bf16, fp8), traces, the bench at batch 1
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit --format=csv,noheader
L=$OUT/timing.log
t() { echo "=== $1 $2 $3" >>$L; env $2 ITERA_LLM_TIMING_WEIGHTS=$3 ITERA_LLM_TIMING_BATCH=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; rc=$?; cat $OUT/t.log >>$L
  echo "$1 $2 $3: rc $rc $(grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in a b; do t $r ITERA_LLM_DECODE_STEP=1 bf16; t $r ITERA_LLM_DECODE_STEP=0 bf16; t $r ITERA_LLM_DECODE_STEP=1 fp8_e4m3; t $r ITERA_LLM_DECODE_STEP=0 fp8_e4m3; done
t tr ITERA_LLM_DECODE_STEP_TRACE=1 bf16
t tr ITERA_LLM_DECODE_STEP_TRACE=1 fp8_e4m3
rm -f $OUT/t.log
timeout 240 $B/itera bench llm --max-time 20 --axis batch=1 --axis weights=bf16,fp8_e4m3 --out $OUT/bench.jsonl >$OUT/bench.log 2>&1
echo "bench rc $?"; grep -E "^\| (bf16|fp8)" $OUT/bench.log | awk -F'|' '{print $2, "tpot", $29, "decode tok/s", $30, "GB/s", $31, "% copy", $32, "logits err", $34, "top1", $35, "note", $38}'

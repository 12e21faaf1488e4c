#!/usr/bin/env bash
# PDL trigger placement: dt0 at start (the old code), dt1 after the wait, dt2 after the main loop
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv,noheader
ITERA_LLM_PDL=1 timeout 200 $B/dt1 --gtest_filter='llm*:-*timing*' >$OUT/tests_dt1_pdl.log 2>&1
echo "llm tests dt1 PDL rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/tests_dt1_pdl.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/tests_dt1_pdl.log | head
t() { # binary pdl weights batch label
  ITERA_LLM_PDL=$2 ITERA_LLM_TIMING_WEIGHTS=$3 ITERA_LLM_TIMING_BATCH=$4 timeout 120 $B/$1 --gtest_filter='*decode_timing_llama*' >>$OUT/timing.log 2>&1
  echo "$5 $1 pdl=$2 $3 b$4: $(grep -E 'CUDA graph' $OUT/timing.log | tail -1 | sed 's/.*context ~[0-9]*, //')"; }
for r in a b; do
  for w in bf16 fp8_e4m3; do
    t dt0 0 $w 1 $r; t dt1 1 $w 1 $r; t dt2 1 $w 1 $r; t dt0 1 $w 1 $r
  done
done
t dt0 0 bf16 64 c; t dt1 1 bf16 64 c; t dt2 1 bf16 64 c

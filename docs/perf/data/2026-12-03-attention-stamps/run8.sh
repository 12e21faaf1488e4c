#!/usr/bin/env bash
# Session 29, call 8 (the kept code, uncommitted on dcf3564; binaries report dcf3564-dirty): every
# llm device test but the timings; bench at batch 16 and 32 (bf16) with the loader warps (the rule)
# and without (ITERA_LLM_WIDE_LOADERS=0), alternating.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 300 $B/itera_device_tests --gtest_filter='llm_*:-llm_products_timing.*:*_timing_*' > $OUT/llm_tests.log 2>&1
echo "llm device tests: rc $? $(grep -E '^\[  (PASSED|FAILED) ' $OUT/llm_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED" $OUT/llm_tests.log | head
for round in 1 2; do
  for v in on off; do
    e=""; [ $v = off ] && e="ITERA_LLM_WIDE_LOADERS=0"
    env $e timeout 200 $B/itera bench llm --max-time 10 -a batch=16,32 -a weights=bf16 -o $OUT/bench_${v}_$round.jsonl \
      > $OUT/bench_${v}_$round.txt 2>&1
    echo "round $round $v: rc $? $(grep -oE '"latency/tpot","value":[0-9.e-]+' $OUT/bench_${v}_$round.jsonl | tr '\n' ' ')"
  done
done

#!/usr/bin/env bash
# Session 2026-12-01 (seventeenth), run 10: the products' algorithms again by whole eager steps, one
# product at a time (ITERA_LLM_STEP_TRIAL=1, an experiment) against the products' own trials,
# alternating: batch 64 (three rounds), batch 16; then the batch-64 bench both ways.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
one() {  # label, env...
  local label=$1; shift
  local s=$(date +%s%3N)
  env "$@" ITERA_LLM_TRIAL_LOG=1 timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== $label"; cat /tmp/t.log; } >> $OUT/run10_stages.log
  echo "$label: $(grep -E 'CUDA graph' /tmp/t.log | sed 's/.*context ~[0-9]*, CUDA graph: //; s/,.*//') | $(( $(date +%s%3N) - s )) ms | $(grep -o 'picked #\?[0-9]*' /tmp/t.log | tr '\n' ' ')"
}
for round in 1 2 3; do
  one "r$round b64 products' trials" ITERA_LLM_TIMING_BATCH=64
  one "r$round b64 step trial" ITERA_LLM_TIMING_BATCH=64 ITERA_LLM_STEP_TRIAL=1
done
one "b16 products' trials" ITERA_LLM_TIMING_BATCH=16
one "b16 step trial" ITERA_LLM_TIMING_BATCH=16 ITERA_LLM_STEP_TRIAL=1
grep -h "llm step trial" $OUT/run10_stages.log | head -5
i=0
for st in 0 1 0 1; do
  i=$((i+1))
  ITERA_LLM_STEP_TRIAL=$st timeout 90 $B/itera bench llm --no-ceilings --max-time 8 -a batch=64 -o /tmp/b_$i.jsonl > /tmp/b.md 2>&1
  echo "bench b64 step trial $st: rc=$? $(python3 -c "
import json
for l in open('/tmp/b_$i.jsonl'):
    d=json.loads(l)
    for m in d.get('metrics',[]):
        if m['name'] in ('throughput/decode_tokens_per_s','throughput/decode_bytes'): print(m['name'].split('/')[1], round(m['value']/1e9,3) if 'bytes' in m['name'] else round(m['value']))
" | tr '\n' ' ')"
done

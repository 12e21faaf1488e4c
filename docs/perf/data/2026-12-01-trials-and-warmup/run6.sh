#!/usr/bin/env bash
# Session 2026-12-01 (seventeenth), run 6: the split products' pair trial (each o_proj / down
# candidate timed with the add, the next norm and the next product). Tests; the batch-64 graph step
# by the trial (three processes, logged) against o_proj forced to run 5's best (#3) and its fastest
# alone (#5); batch 32, 16, 8; the batch-64 bench.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 120 $B/itera_device_tests --gtest_filter='*decode_fusions*:*tiny*:*slots_serve*:*prepared_decode*' > $OUT/run6_tests.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/run6_tests.log; grep -E "^\[  FAILED|graph with the trials" $OUT/run6_tests.log
one() {  # label, env...
  local label=$1; shift
  env "$@" ITERA_LLM_TRIAL_LOG=1 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== $label"; cat /tmp/t.log; } >> $OUT/run6_stages.log
  echo "$label: $(grep -E 'CUDA graph' /tmp/t.log | sed 's/.*context ~[0-9]*, CUDA graph: //; s/,.*//') | o $(grep -E '/o_proj ' /tmp/t.log | awk '{print $3}') gate_up $(grep -E 'mlp_block/gate_up ' /tmp/t.log | awk '{print $3}') down $(grep -E 'mlp_block/down ' /tmp/t.log | awk '{print $3}') qkv $(grep -E '/qkv ' /tmp/t.log | awk '{print $3}') | $(grep -o 'picked #[0-9]*' /tmp/t.log | tr '\n' ' ')"
}
for round in 1 2; do
  one "r$round b64 trial" ITERA_LLM_TIMING_BATCH=64
  one "r$round b64 o_proj=3" ITERA_LLM_TIMING_BATCH=64 ITERA_LLM_TRIAL_FORCE=o_proj=3
  one "r$round b64 o_proj=5" ITERA_LLM_TIMING_BATCH=64 ITERA_LLM_TRIAL_FORCE=o_proj=5
done
one "r3 b64 trial" ITERA_LLM_TIMING_BATCH=64
for b in 32 16 8; do one "b$b trial" ITERA_LLM_TIMING_BATCH=$b; done
grep -h "llm product trial" $OUT/run6_stages.log | head -12
timeout 90 $B/itera bench llm --max-time 10 -a batch=64 -o $OUT/run6_bench_b64.jsonl > $OUT/run6_bench_b64.md 2>&1
echo "bench b64 rc=$?"; python3 - $OUT/run6_bench_b64.jsonl <<'PY'
import json,sys
for line in open(sys.argv[1]):
    d=json.loads(line)
    for m in d.get('metrics',[]):
        if m['name'] in ('throughput/decode_tokens_per_s','throughput/decode_bytes','latency/tpot'): print(' ',m['name'],round(m['value'],5))
    if 'note' in d: print(' note', d['note'])
PY
grep -o 'throttled[^",|]*' $OUT/run6_bench_b64.md | sort | uniq -c

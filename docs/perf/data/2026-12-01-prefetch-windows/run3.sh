#!/usr/bin/env bash
# Session 2026-12-01 (eighteenth), run 3: run 2's bulk prefetches made the small kernels wait for
# them (~1 TB/s); here prefetch.global.L2 a line at a time (ITERA_LLM_L2_AHEAD_HOW=lines), bf16
# batch 64, alternating with off; windows one at a time; the bench off / on alternating.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
ITERA_LLM_L2_AHEAD=8 ITERA_LLM_L2_AHEAD_HOW=lines timeout 200 $B/itera_device_tests --gtest_filter='llm*decode*:llm*graph*' > $OUT/run3_tests_lines8.log 2>&1; echo "llm tests with lines 8 rc=$?"; grep -E "^\[  PASSED|^\[  FAILED" $OUT/run3_tests_lines8.log
one() {  # label, env...
  local label=$1; shift
  env "$@" ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== $label"; cat /tmp/t.log; } >> $OUT/run3_stages.log
  echo "$label: $(grep -E 'CUDA graph' /tmp/t.log | sed 's/.*context ~[0-9]*, CUDA graph: //; s/,.*//') | $(grep -E '/(qkv|rope|attention|o_proj|residual_norm|gate_up|swiglu|down) ' /tmp/t.log | awk '{printf "%s %s  ", $1, $3}' | sed 's/attention_block\///g; s/mlp_block\///g')"
}
L="ITERA_LLM_L2_AHEAD_HOW=lines"
for round in 1 2; do
  one "r$round off"
  one "r$round lines 4MB" $L ITERA_LLM_L2_AHEAD=4
  one "r$round lines 8MB" $L ITERA_LLM_L2_AHEAD=8
  one "r$round lines 16MB" $L ITERA_LLM_L2_AHEAD=16
  one "r$round lines 8MB end" $L ITERA_LLM_L2_AHEAD=8 ITERA_LLM_L2_AHEAD_AT=end
done
for w in 1 2 4 8; do one "lines 8MB window $w" $L ITERA_LLM_L2_AHEAD=8 ITERA_LLM_L2_AHEAD_WINDOWS=$w; done
for i in 1 2; do
 for mb in 0 8; do
  f=$OUT/run3_bench_${mb}MB_$i.jsonl
  ITERA_LLM_L2_AHEAD=$mb $L timeout 120 $B/itera bench llm --no-ceilings --max-time 10 -a batch=64 -o $f > /tmp/b.md 2>&1
  echo "bench lines $mb MB ($i): rc=$? $(python3 -c "
import json,sys
for line in open('$f'):
    d=json.loads(line)
    got={m['name']:m['value'] for m in d.get('metrics',[])}
    if 'throughput/decode_tokens_per_s' in got: print(round(got['throughput/decode_tokens_per_s'],1), round(got['throughput/decode_bytes']/4.23e12,4))
")"
 done
done

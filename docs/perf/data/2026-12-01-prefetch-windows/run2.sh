#!/usr/bin/env bash
# Session 2026-12-01 (eighteenth), run 2: L2 prefetches issued by the decode step's small kernels
# (the norms, RoPE, SwiGLU) for the reader after them (ITERA_LLM_L2_AHEAD=<MB a window>), bf16
# batch 64, graph step and eager stage table, alternating with off; windows one at a time; then the
# bench at off / the two amounts. The llm device tests with the prefetch on first (addresses).
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
ITERA_LLM_L2_AHEAD=16 timeout 200 $B/itera_device_tests --gtest_filter='llm*' > $OUT/run2_tests_ahead16.log 2>&1; echo "llm tests with ahead 16 rc=$?"; grep -E "^\[  PASSED|^\[  FAILED" $OUT/run2_tests_ahead16.log
one() {  # label, env...
  local label=$1; shift
  env "$@" ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== $label"; cat /tmp/t.log; } >> $OUT/run2_stages.log
  echo "$label: $(grep -E 'CUDA graph' /tmp/t.log | sed 's/.*context ~[0-9]*, CUDA graph: //; s/,.*//') | $(grep -E '/(qkv|rope|attention|o_proj|residual_norm|gate_up|swiglu|down) ' /tmp/t.log | awk '{printf "%s %s  ", $1, $3}')"
}
for round in 1 2; do
  one "r$round off"
  one "r$round 8MB" ITERA_LLM_L2_AHEAD=8
  one "r$round 16MB" ITERA_LLM_L2_AHEAD=16
  one "r$round 32MB" ITERA_LLM_L2_AHEAD=32
  one "r$round 16MB end" ITERA_LLM_L2_AHEAD=16 ITERA_LLM_L2_AHEAD_AT=end
done
for w in 1 2 4 8; do one "16MB window $w" ITERA_LLM_L2_AHEAD=16 ITERA_LLM_L2_AHEAD_WINDOWS=$w; done
one "r3 off"
for mb in 0 16 0 16; do
  ITERA_LLM_L2_AHEAD=$mb timeout 120 $B/itera bench llm --no-ceilings --max-time 10 -a batch=64 -o $OUT/run2_bench_$mb.jsonl > /tmp/b.md 2>&1
  echo "bench ahead $mb MB: rc=$? $(python3 -c "
import json,sys
for line in open('$OUT/run2_bench_$mb.jsonl'):
    d=json.loads(line)
    got={m['name']:m['value'] for m in d.get('metrics',[])}
    if 'throughput/decode_tokens_per_s' in got: print(round(got['throughput/decode_tokens_per_s'],1), round(got['throughput/decode_bytes']/4.23e12,4))
")"
done

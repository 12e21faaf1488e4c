#!/usr/bin/env bash
# Session 24, call 8: the 128-key-tile prefill attention with two or three K/V stages
# (ITERA_X_ATTN_STAGES3, experiment knob) against 64-key tiles: the stage table (two rounds,
# alternating), then the sustained 2048-token prefill bench each way (the card's power cap).
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
table() {  # name, env...
  local name=$1; shift
  env "$@" ITERA_LLM_PREFILL_TOKENS=2048 timeout 90 $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/table_$name.log 2>&1
  echo "$name rc=$?: $(grep -E '/attention ' $OUT/table_$name.log | awk '{print "attention",$3,$4}') $(grep -E 'gate_up' $OUT/table_$name.log | awk '{print "gate_up",$3}') $(grep -E 'whole pass' $OUT/table_$name.log | awk '{print "pass",$3,$4}')"
}
for r in 1 2; do
  table k64_r$r ITERA_PREFILL_ATTENTION_KEYS_128=0
  table k128s2_r$r ITERA_PREFILL_ATTENTION_KEYS_128=1
  table k128s3_r$r ITERA_PREFILL_ATTENTION_KEYS_128=1 ITERA_X_ATTN_STAGES3=1
done
bench() {  # name, env...
  local name=$1; shift
  env "$@" timeout 90 $B/itera bench llm --max-time 10 -a prompt=2048 -a output=1 -o $OUT/bench_$name.jsonl > $OUT/bench_$name.md 2>&1
  echo "bench $name rc=$?: $(grep -E '^\| ok' $OUT/bench_$name.md | head -1 | awk -F'|' '{print $3, $(NF-6), $(NF-5), $(NF-2)}')"
}
bench k64 ITERA_PREFILL_ATTENTION_KEYS_128=0
bench k128s2 ITERA_PREFILL_ATTENTION_KEYS_128=1
bench k128s3 ITERA_PREFILL_ATTENTION_KEYS_128=1 ITERA_X_ATTN_STAGES3=1
bench k64b ITERA_PREFILL_ATTENTION_KEYS_128=0
cd $OUT && tar czf logs.tgz *.log *.md *.jsonl && rm -f *.log *.md *.jsonl

#!/usr/bin/env bash
# Session 2026-12-01 (seventeenth), run 4: what the trial measured against what its pick then took in
# the step (batch 64): six processes of the timing test with ITERA_LLM_TRIAL_LOG, one pass per
# candidate (the default) and three (ITERA_LLM_TRIAL_PASSES=3); 8 and 32 candidates. Then the server
# scenario's warm-up cost (4 requests, wall time; 726373c's binary captures inside the run instead).
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
i=0
for cfg in "1 8" "3 8" "1 8" "3 8" "1 32" "3 32" "1 8" "3 8"; do
  set -- $cfg; i=$((i+1))
  ITERA_LLM_TRIAL_LOG=1 ITERA_LLM_TRIAL_PASSES=$1 ITERA_LLM_TRIAL_CANDIDATES=$2 ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== process $i passes $1 candidates $2"; cat /tmp/t.log; } >> $OUT/run4_stages.log
  echo "process $i passes $1 candidates $2: $(grep -E 'CUDA graph' /tmp/t.log | sed 's/.*CUDA graph: //; s/,.*//') | gate_up $(grep -E 'mlp_block/gate_up ' /tmp/t.log | awk '{print $3}') down $(grep -E 'mlp_block/down ' /tmp/t.log | awk '{print $3}') qkv $(grep -E '/qkv ' /tmp/t.log | awk '{print $3}') o $(grep -E '/o_proj ' /tmp/t.log | awk '{print $3}') | picks $(grep -o 'picked #[0-9]*' /tmp/t.log | tr '\n' ' ')"
done
ms() { date +%s%3N; }
for who in itera itera_old itera itera_old; do
  s=$(ms)
  timeout 200 $B/$who bench llm --no-ceilings -a scenario=server -a batch=64 -a rate=100 -a requests=4 -o $OUT/run4_warm_$who_$s.jsonl > /dev/null 2>&1
  echo "server 4 requests, $who: rc=$? $(( $(ms) - s )) ms wall"
done
rm -f $OUT/run4_warm_*.jsonl

#!/usr/bin/env bash
# Session 2026-12-01 (seventeenth), run 5: does the gate/up product's time in the step follow
# o_proj's algorithm? o_proj's trial pick forced to each of cuBLASLt's first eight
# (ITERA_LLM_TRIAL_FORCE=o_proj=k), twice; the batch-64 graph step and the eager stage table (the
# picks' times). Then the server scenario's warm-up cost against 726373c's binary.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for round in 1 2; do
  for k in 1 2 3 4 5 6 7 8; do
    ITERA_LLM_TRIAL_FORCE=o_proj=$k ITERA_LLM_TRIAL_LOG=1 ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
    { echo "== round $round o_proj=$k"; cat /tmp/t.log; } >> $OUT/run5_stages.log
    echo "r$round o_proj #$k: $(grep -E 'CUDA graph' /tmp/t.log | sed 's/.*CUDA graph: //; s/,.*//') | o $(grep -E '/o_proj ' /tmp/t.log | awk '{print $3}') rn $(grep -E 'attention_block/residual_norm ' /tmp/t.log | awk '{print $3}') gate_up $(grep -E 'mlp_block/gate_up ' /tmp/t.log | awk '{print $3}') swiglu $(grep -E 'mlp_block/swiglu ' /tmp/t.log | awk '{print $3}') down $(grep -E 'mlp_block/down ' /tmp/t.log | awk '{print $3}') | $(grep -o 'picked #[0-9]*' /tmp/t.log | tr '\n' ' ')"
  done
done
grep -h "o_proj (ms" $OUT/run5_stages.log | head -2
ms() { date +%s%3N; }
for who in itera itera_old itera itera_old; do
  s=$(ms)
  timeout 200 $B/$who bench llm --no-ceilings -a scenario=server -a batch=64 -a rate=100 -a requests=4 -o /tmp/warm_${who}_$s.jsonl > /dev/null 2>&1
  echo "server 4 requests, $who: rc=$? $(( $(ms) - s )) ms wall"
done

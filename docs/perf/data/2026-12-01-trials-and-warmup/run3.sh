#!/usr/bin/env bash
# Session 2026-12-01 (seventeenth), run 3: how many of cuBLASLt's algorithms the trial times (8, 16,
# 32; ITERA_LLM_TRIAL_CANDIDATES) at batch 64 and 16, alternating; what the server scenario's
# graph preparation costs before its run (4 requests, wall time against 726373c's binary).
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for round in 1 2; do
  for n in 8 16 32; do
    for b in 64 16; do
      ITERA_LLM_TRIAL_CANDIDATES=$n ITERA_LLM_TIMING_BATCH=$b timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
      { echo "== round $round candidates $n batch $b"; cat /tmp/t.log; } >> $OUT/run3_stages.log
      echo "round $round candidates $n: $(grep -E 'CUDA graph' /tmp/t.log | sed 's/llama-3.1-8b bf16 decode, bf16 compute, bf16 KV cache, //')"
    done
  done
done
ms() { date +%s%3N; }
for who in itera itera_old itera; do
  for n in 8 32; do
    [ $who = itera_old ] && [ $n = 32 ] && continue
    s=$(ms)
    ITERA_LLM_TRIAL_CANDIDATES=$n timeout 200 $B/$who bench llm --no-ceilings -a scenario=server -a batch=64 -a rate=100 -a requests=4 -o $OUT/run3_warm.jsonl > /dev/null 2>&1
    echo "server 4 requests, $who, candidates $n: rc=$? $(( $(ms) - s )) ms wall"
  done
done

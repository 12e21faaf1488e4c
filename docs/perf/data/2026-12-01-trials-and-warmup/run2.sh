#!/usr/bin/env bash
# Session 2026-12-01 (seventeenth), run 2: the product trial (qkv, gate/up, LM head) A/B at batch 64
# and 16; the prefill's stage table (its norms against 0.90 ms a pass); the server scenario with
# the graphs prepared before the run (new) against the old binary (726373c, graphs captured in it).
set -uo pipefail
tar xzf bb.tgz; true
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 120 $B/itera_device_tests --gtest_filter='*decode_fusions*:*tiny*:*slots_serve*:*prepared_decode*' > $OUT/run2_tests.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/run2_tests.log; grep -E "^\[  FAILED|graph with the trials" $OUT/run2_tests.log
for round in 1 2; do
  for pt in 0 1; do
    for b in 64 16; do
      ITERA_LLM_PRODUCT_TRIAL=$pt ITERA_LLM_TIMING_BATCH=$b timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
      { echo "== round $round trial $pt batch $b"; cat /tmp/t.log; } >> $OUT/run2_stages.log
      echo "round $round trial $pt: $(grep -E 'CUDA graph' /tmp/t.log | sed 's/llama-3.1-8b bf16 decode, bf16 compute, bf16 KV cache, //')"
    done
  done
done
timeout 90 $B/itera_device_tests --gtest_filter='*prefill_timing_llama*' > $OUT/run2_prefill_stages.log 2>&1; echo "prefill stages rc=$?"; grep -E "norm|total|sum" $OUT/run2_prefill_stages.log | head -8
for who in new old; do
  if [ $who = new ]; then X=$B/itera; else X=$B/itera_old; fi
  s=$(date +%s.%N)
  timeout 150 $X bench llm --no-ceilings -a scenario=server -a batch=64 -a rate=16 -a requests=256 -a ttft_ms=1000 -a tpot_ms=50 -o $OUT/run2_server_$who.jsonl > $OUT/run2_server_$who.md 2>&1
  echo "server $who rc=$? $(echo "$(date +%s.%N) - $s" | bc) s"
done

#!/usr/bin/env bash
# Session 2026-12-01 (seventeenth), run 1: last session's run10_not_run.sh on 726373c (the split
# products' trial on by default, at capture only; the review's mends), outputs renamed run1_*, the
# batch-64 bench added at its end. The fusion, tiny, slots and decode kernels' tests; the batch-64
# and batch-8 stage tables; the 2048-token prefill bench.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 100 $B/itera_device_tests --gtest_filter='*decode_fusions*:*tiny*:*decode_kernels*:*slots_serve*' > $OUT/run1_tests.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/run1_tests.log; grep -E "^\[  FAILED" $OUT/run1_tests.log
for b in 64 8; do
  ITERA_LLM_TIMING_BATCH=$b timeout 40 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== batch $b"; cat /tmp/t.log; } >> $OUT/run1_stages.log
  grep -E "CUDA graph|/o_proj|/down " /tmp/t.log | sed 's/llama-3.1-8b bf16 decode, bf16 compute, bf16 KV cache, //'
done
# The 2048-token prefill (its norm passes run the changed norm kernel; bundle build/itera too).
if [ -x $B/itera ]; then
  timeout 120 $B/itera bench llm --max-time 15 -a prompt=2048 -a output=1 -o $OUT/run1_bench_prefill.jsonl > $OUT/run1_bench_prefill.md 2>&1
  echo "prefill rc=$?"; grep -E "^\| 1 " $OUT/run1_bench_prefill.md | head -3
fi
timeout 90 $B/itera bench llm --max-time 10 -a batch=64 -o $OUT/run1_bench_b64.jsonl > $OUT/run1_bench_b64.md 2>&1
echo "b64 rc=$?"; grep -E "^\| 64 " $OUT/run1_bench_b64.md | head -3; grep -o '"decode_bytes[^,]*' $OUT/run1_bench_b64.jsonl | head; grep -o 'throttled[^,]*' $OUT/run1_bench_b64.jsonl | sort | uniq -c

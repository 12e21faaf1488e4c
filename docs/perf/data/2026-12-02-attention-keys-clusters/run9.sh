#!/usr/bin/env bash
# Session 24, call 9: the 128-key-tile prefill attention (two stages) against 64-key tiles held
# 4 s each (--min-time 4 --max-time 4: the same thermal state for both, alternating), the stage
# table at 8192 tokens (attention a larger share), then the llm device tests with 128-key tiles.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for r in 1 2; do for w in 0 1; do
  ITERA_PREFILL_ATTENTION_KEYS_128=$w timeout 60 $B/itera bench llm --min-time 4 --max-time 4 -a prompt=2048 -a output=1 -o $OUT/held_w${w}_r$r.jsonl > $OUT/held_w${w}_r$r.md 2>&1
  echo "held keys128=$w round $r rc=$?: $(grep -E 'gemm.bf16 ' $OUT/held_w${w}_r$r.md | head -1 | awk -F'|' '{print "ceiling",$3}') $(grep -E '^\| ok' $OUT/held_w${w}_r$r.md | head -1 | awk -F'|' '{print "median",$3}')"
done; done
for w in 0 1; do
  ITERA_PREFILL_ATTENTION_KEYS_128=$w ITERA_LLM_PREFILL_TOKENS=8192 timeout 90 $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/table8k_w$w.log 2>&1
  echo "8192 tokens keys128=$w rc=$?: $(grep -E '/attention ' $OUT/table8k_w$w.log | awk '{print "attention",$3,$4}') $(grep -E 'whole pass' $OUT/table8k_w$w.log | awk '{print "pass",$3,$4}')"
done
ITERA_PREFILL_ATTENTION_KEYS_128=1 timeout 240 $B/itera_device_tests --gtest_filter='llm_*:-llm_products_timing.*:*_timing_*' > $OUT/llm_tests_k128.log 2>&1
echo "llm tests keys128=1 rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $OUT/llm_tests_k128.log | head -8
cd $OUT && tar czf logs.tgz *.log *.md *.jsonl && rm -f *.log *.md *.jsonl

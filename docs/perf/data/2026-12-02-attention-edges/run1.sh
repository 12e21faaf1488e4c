#!/usr/bin/env bash
# Session 22, call 1 on 14bb088: the previous session's run9 (llm device tests with the review's
# mends, batch-64 graph table with o_proj's trial pick, the benches) and run10 (the decode
# attention's ablation, a second test binary built with attention_ablation_not_run.diff applied).
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for r in 1 2; do
  for a in 0 1 2 4 7; do
    ITERA_X_ATTN_ABLATE=$a ITERA_LLM_TIMING_BATCH=64 timeout 60 $B/itera_device_tests_ablate --gtest_filter='*decode_timing_llama*' > $OUT/t.log 2>&1
    step=$(grep -oE "CUDA graph: [0-9.]+ ms/step" $OUT/t.log | grep -oE "[0-9.]+")
    att=$(sed -n '/graph step by kernel/,/in order/p' $OUT/t.log | grep -i attention | head -2 | tr -s ' ' | tr '\n' ';')
    echo "round $r ablate $a: graph $step ms | $att" | tee -a $OUT/ablation.txt
    [ $r = 1 ] && [ $a = 0 ] && cp $OUT/t.log $OUT/ablate0.log
  done
done
rm -f $OUT/t.log
ITERA_LLM_TRIAL_LOG=1 ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run1_b64.log 2>&1
echo "b64 timing rc=$?"; grep -E "CUDA graph:|llm product trial, o_proj" $OUT/run1_b64.log | head -4
sed -n '/graph step by kernel/,/in order/p' $OUT/run1_b64.log | head -14
timeout 240 $B/itera_device_tests --gtest_filter='*llm*:-*decode_timing*:*search*' > $OUT/run1_llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/run1_llm_tests.log | head
timeout 90 $B/itera bench llm --max-time 10 -a prompt=2048 -a output=1 -o $OUT/run1_prefill.jsonl > $OUT/run1_prefill.md 2>&1; echo "prefill rc=$?"
timeout 150 $B/itera bench llm --max-time 10 -a batch=1,64 -a weights=bf16,fp8_e4m3 -o $OUT/run1_decode.jsonl > $OUT/run1_decode.md 2>&1; echo "decode rc=$?"
cat $OUT/ablation.txt
grep -E "^\| batch=" $OUT/run1_decode.md; grep -E "% of prefill|ttft" $OUT/run1_prefill.md | head -3

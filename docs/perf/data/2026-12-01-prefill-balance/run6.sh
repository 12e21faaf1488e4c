#!/usr/bin/env bash
# run 6: the batch-64 decode attention issuing tile j + 2 before its wait for tile j (two in flight while it waits)
# the llm device tests, then batch-64 decode stages prev (4607335) / attn2, alternating
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 200 $B/dt_attn2 --gtest_filter='llm*:-*timing*' > $OUT/llm_tests_attn2.log 2>&1; echo "llm tests attn rc=$?"; tail -1 $OUT/llm_tests_attn2.log; grep -E "^\[  FAILED" $OUT/llm_tests_attn2.log | head
for r in 1 2; do for v in prev attn2; do
  ITERA_LLM_TIMING_BATCH=64 timeout 100 $B/dt_$v --gtest_filter='*decode_timing_llama*' > $OUT/decode_b64_${v}_$r.log 2>&1
  echo "r$r $v: $(grep 'CUDA graph' $OUT/decode_b64_${v}_$r.log | sed -E 's/.*context ~[0-9]+, //;s/, [0-9.]+ tokens.*//') | $(grep -E '/attention ' $OUT/decode_b64_${v}_$r.log | awk '{printf "%s %s; ", $1, $3}')"
done; done
S="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis"
ITERA_LLM_TIMING_BATCH=64 timeout 150 ncu --clock-control none --kernel-name regex:decode_attention --launch-skip 40 --launch-count 1 $S $B/dt_attn2 --gtest_filter='*decode_timing_llama*' > $OUT/ncu_b64_attention_attn2.txt 2>&1; echo "ncu rc=$?"
grep -E "Duration|DRAM Throughput|Issue Slots Busy|Executed Ipc Active|Warp Cycles Per Issued|No Eligible" $OUT/ncu_b64_attention_attn2.txt | head

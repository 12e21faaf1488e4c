#!/usr/bin/env bash
# run 3: SwiGLU fast only outside the decode step, RoPE's 32-bit index arithmetic: the llm device
# tests, the prefill stage table base/new, the batch-1 decode A/B base/new; Nsight Compute on the
# batch-64 decode attention; the batch-64 stage table (new)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 200 $B/dt_new --gtest_filter='llm*:-*timing*' > $OUT/llm_tests_new.log 2>&1; echo "llm tests new rc=$?"; tail -2 $OUT/llm_tests_new.log; grep -E "^\[  FAILED" $OUT/llm_tests_new.log | head
f=$OUT/prefill.log
for r in 1 2; do for v in base new; do
  echo "=== round $r $v" >> $f
  ITERA_LLM_PREFILL_TOKENS=2048 timeout 100 $B/dt_$v --gtest_filter='*prefill_timing*' >> $f 2>&1
  echo "r$r $v: $(grep 'per call' $f | tail -1 | sed -E 's/.*compute: //;s/ \(host.*//') | $(grep -E '/attention |/swiglu |/rope |sum of' $f | tail -4 | awk '{printf "%s %s; ", $1, $(NF-1)}')"
done; done
timeout 200 bash scripts/device_decode_ab.sh bb.tgz $OUT/ab --rounds 3 base=dt_base new=dt_new 2>&1 | tail -7
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats"
ITERA_LLM_TIMING_BATCH=64 timeout 150 ncu --clock-control none --kernel-name regex:decode_attention --launch-skip 40 --launch-count 1 $S $B/dt_new --gtest_filter='*decode_timing_llama*' > $OUT/ncu_b64_attention.txt 2>&1; echo "ncu b64 attention rc=$?"
grep -E "decode_attention|Grid Size|Block Size|Registers Per|Duration|DRAM Throughput|L2 Cache Throughput|Issue Slots Busy|Achieved Occupancy|Theoretical Occ|Warp Cycles Per Issued|No Eligible|Dynamic Shared" $OUT/ncu_b64_attention.txt | head -16
ITERA_LLM_TIMING_BATCH=64 timeout 100 $B/dt_new --gtest_filter='*decode_timing_llama*' > $OUT/decode_b64_new.log 2>&1
echo "b64 new: $(grep 'CUDA graph' $OUT/decode_b64_new.log | sed -E 's/.*context ~[0-9]+, //') | $(grep -E '/swiglu |/rope |/attention ' $OUT/decode_b64_new.log | awk '{printf "%s %s; ", $1, $3}')"

#!/usr/bin/env bash
# run 2: the prefill bench (TTFT, share of the ceiling) base/new; Nsight Compute on the prefill's
# attention and RoPE (new); batch-64 decode stages base/new; batch-1 decode A/B base/new (SwiGLU's
# fast division inside the step)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for v in base new; do
  timeout 120 $B/itera_$v bench llm --max-time 8 -a prompt=2048 -a output=1 -o $OUT/prefill_bench_$v.jsonl > $OUT/prefill_bench_$v.md 2>&1; echo "bench $v rc=$?"
  grep -iE "ttft|prefill|ceiling" $OUT/prefill_bench_$v.md | head -8
done
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section Occupancy"
ITERA_LLM_PREFILL_TOKENS=2048 timeout 150 ncu --clock-control none --kernel-name regex:attention_kernel --launch-skip 40 --launch-count 1 $S $B/dt_new --gtest_filter='*prefill_timing*' > $OUT/ncu_attention.txt 2>&1; echo "ncu attention rc=$?"
ITERA_LLM_PREFILL_TOKENS=2048 timeout 150 ncu --clock-control none --kernel-name regex:bias_rope_store_vec --launch-skip 40 --launch-count 1 $S $B/dt_new --gtest_filter='*prefill_timing*' > $OUT/ncu_rope.txt 2>&1; echo "ncu rope rc=$?"
for n in $OUT/ncu_*.txt; do echo "--- $n"; grep -E "Grid Size|Registers Per|Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Achieved Occupancy|Warp Cycles Per Issued|No Eligible" $n | head -14; done
for v in base new; do
  ITERA_LLM_TIMING_BATCH=64 timeout 100 $B/dt_$v --gtest_filter='*decode_timing_llama*' > $OUT/decode_b64_$v.log 2>&1
  echo "b64 $v: $(grep 'CUDA graph' $OUT/decode_b64_$v.log | sed -E 's/.*context ~[0-9]+, //') | $(grep -E '/swiglu |/rope |/attention ' $OUT/decode_b64_$v.log | awk '{printf "%s %s; ", $1, $3}')"
done
timeout 200 bash scripts/device_decode_ab.sh bb.tgz $OUT/ab --rounds 3 base=dt_base new=dt_new 2>&1 | tail -8

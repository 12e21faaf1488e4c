#!/usr/bin/env bash
# run 8: the fused qkv product without a staging tile (the consumers store the rounded sums into
# the qkv rows, the epilogue warps rotate them from L2; four stages instead of three): its tests and
# the engine's; the 2048-token prefill's stage table against the previous binary (prev) and against
# cuBLASLt + RoPE (ITERA_LLM_FUSED_QKV=0), alternating; Nsight Compute on the new qkv kernel
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 200 $B/itera_device_tests --gtest_filter='llm*:vit_gemm*:-*timing*' > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -1 $OUT/tests.log; grep -E "^\[  FAILED|Failure" -A4 $OUT/tests.log | head -20
for r in 1 2; do for v in prev new unfused; do
  bin=$B/itera_device_tests; [ $v = prev ] && bin=$B/dt_prev
  q=512; [ $v = unfused ] && q=0
  ITERA_LLM_FUSED_QKV=$q ITERA_LLM_PREFILL_TOKENS=2048 timeout 100 $bin --gtest_filter='*prefill_timing*' > $OUT/prefill_${v}_$r.log 2>&1
  echo "== r$r $v"; grep -E "/qkv|/rope|gate_up|sum of" $OUT/prefill_${v}_$r.log
done; done
S="--section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis"
ITERA_LLM_PREFILL_TOKENS=2048 timeout 200 ncu --clock-control none --kernel-name-base demangled --kernel-name regex:'fused_product_kernel.*rope' --launch-skip 10 --launch-count 1 $S $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/ncu_qkv.txt 2>&1; echo "ncu qkv rc=$?"
grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued" $OUT/ncu_qkv.txt | head -8

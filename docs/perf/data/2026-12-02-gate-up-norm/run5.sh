#!/usr/bin/env bash
# Session 27, call 5: the normalising gate/up (weight in shared memory, A from registers) with the
# next step's stage waited for and its x and weight values loaded while this step's products run
# (ITERA_X_NORM_OVERLAP=1: no C7513 now) against the serial step (0); tests in both; the graph step
# at batch 64 (three rounds) and 32 (two rounds, ITERA_LLM_GATE_UP_NORM_ROWS=1: the rule's 33 would
# leave 32 out), base = ITERA_LLM_GATE_UP_NORM=0.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for o in 0 1; do
  ITERA_X_NORM_OVERLAP=$o timeout 200 $B/itera_device_tests --gtest_filter='llm_fused_products.*:llm_decode_fusions.*' > $OUT/tests_o$o.log 2>&1
  echo "tests overlap=$o rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Expected|actual|gate/up norm" $OUT/tests_o$o.log | head -12
done
t() {  # name batch env...
  local name=$1 b=$2; shift 2
  local f=$OUT/t_${name}_b$b.log
  env "$@" ITERA_LLM_GATE_UP_NORM_ROWS=1 ITERA_LLM_TIMING_BATCH=$b timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  local n=$(grep -A10 "graph step by kernel" $f | tail -9 | awk '$2 ~ /^[0-9]+$/ {printf "%s:%s=%s ", substr($1,1,20), $2, $3}')
  echo "$name b$b graph $g ms  $n" | tee -a $OUT/ab.txt >/dev/null
}
for r in 1 2 3; do
  t base 64 ITERA_LLM_GATE_UP_NORM=0; t norm0 64 ITERA_X_NORM_OVERLAP=0; t norm1 64 ITERA_X_NORM_OVERLAP=1
done
for r in 1 2; do t base 32 ITERA_LLM_GATE_UP_NORM=0; t norm0 32 ITERA_X_NORM_OVERLAP=0; t norm1 32 ITERA_X_NORM_OVERLAP=1; done
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | head -1)
ITERA_X_NORM_OVERLAP=1 ITERA_LLM_TIMING_BATCH=64 timeout 200 $NCU --clock-control none --graph-profiling node \
    --kernel-name-base demangled -k 'regex:\(int\)112, \(int\)64' --launch-skip 8 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats \
    $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/ncu_norm1.txt 2>&1
echo "ncu norm1: $(grep -E 'Duration|DRAM Throughput|L2 Cache Throughput|Warp Cycles Per Issued' $OUT/ncu_norm1.txt | tr -s ' ' | tr '\n' ';')"
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
echo; sort -s -k2,2 -k1,1 $OUT/ab.txt | cut -c1-300

#!/usr/bin/env bash
# Session 24, call 2: why the product clusters ran slower (run 1: gate_up 22.0 -> 27.4 ms): the
# grid cudaOccupancyMaxActiveClusters gave, against a grid forced to 66 clusters (132 SMs), and
# the unclustered kernel; ITERA_X_CLUSTERS is an experiment-only override.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
run() {  # name, env...
  local name=$1; shift
  env "$@" ITERA_LLM_PREFILL_TOKENS=2048 timeout 90 $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/table_$name.log 2>&1
  echo "$name rc=$?: $(grep -E 'ms per call' $OUT/table_$name.log | sed 's/.*: //;s/ (.*//') $(grep EXPERIMENT $OUT/table_$name.log)"
  grep -E "qkv  |gate_up|sum of" $OUT/table_$name.log
}
for r in 1 2; do
  run off_r$r ITERA_LLM_PRODUCT_CLUSTER=0
  run occ_r$r ITERA_LLM_PRODUCT_CLUSTER=1
  run f66_r$r ITERA_LLM_PRODUCT_CLUSTER=1 ITERA_X_CLUSTERS=66
  run f64_r$r ITERA_LLM_PRODUCT_CLUSTER=1 ITERA_X_CLUSTERS=64
done
ITERA_LLM_PRODUCT_CLUSTER=1 ITERA_X_CLUSTERS=66 timeout 60 $B/itera_device_tests --gtest_filter='llm_fused_products.*' > $OUT/fused_f66.log 2>&1
echo "fused products forced 66 rc=$?"; grep -E "^\[  (PASSED|FAILED) " $OUT/fused_f66.log
cd $OUT && tar czf logs.tgz *.log && rm -f *.log

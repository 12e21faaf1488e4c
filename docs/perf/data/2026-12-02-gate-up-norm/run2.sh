#!/usr/bin/env bash
# Session 27, call 2: the normalising gate/up rewritten with A from registers (wgmma RS; no 16-bit
# box, no proxy fence or barrier a step): its tests (kernel against fp64 and against rms_norm +
# gate_up_swiglu; the engine's three modes), with the next step formed under the products
# (ITERA_X_NORM_OVERLAP=1, ptxas serialises those wgmmas: C7513) or after them (0); then the
# batch-64 graph step, base (ITERA_LLM_GATE_UP_NORM=0) / norm0 / norm1 alternating, three rounds;
# batch 16 two rounds.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for o in 0 1; do
  ITERA_X_NORM_OVERLAP=$o timeout 200 $B/itera_device_tests --gtest_filter='llm_fused_products.*:llm_decode_fusions.*' > $OUT/tests_o$o.log 2>&1
  echo "tests overlap=$o rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|Expected|actual|gate/up norm" $OUT/tests_o$o.log | head -24
done
t() {  # name batch env...
  local name=$1 b=$2; shift 2
  local f=$OUT/t_${name}_b$b.log
  env "$@" ITERA_LLM_TIMING_BATCH=$b timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  local n=$(grep -A10 "graph step by kernel" $f | tail -9 | awk '$2 ~ /^[0-9]+$/ {printf "%s:%s=%s ", substr($1,1,20), $2, $3}')
  echo "$name b$b graph $g ms  $n" | tee -a $OUT/ab.txt
}
for r in 1 2 3; do
  t base 64 ITERA_LLM_GATE_UP_NORM=0; t norm0 64 ITERA_X_NORM_OVERLAP=0; t norm1 64 ITERA_X_NORM_OVERLAP=1
done
for r in 1 2; do t base 16 ITERA_LLM_GATE_UP_NORM=0; t norm0 16 ITERA_X_NORM_OVERLAP=0; t norm1 16 ITERA_X_NORM_OVERLAP=1; done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
echo; sort -s -k2,2 -k1,1 $OUT/ab.txt | cut -c1-330

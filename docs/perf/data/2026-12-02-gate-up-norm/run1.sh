#!/usr/bin/env bash
# Session 27, call 1: the fused gate/up normalising the residual itself (ITERA_LLM_GATE_UP_NORM,
# default on; o_proj unsplit, no norm kernel) against the split o_proj + add_rms_norm (=0); its
# kernel and engine tests first. Beside it, at GATE_UP_NORM=0: last session's prepared evict_first
# w boxes (ITERA_X_W_FIRST=1) and ITERA_X_POST_NORM (temporary, timing only: 1 the add + norm after
# the split o_proj left out, 3 o_proj unsplit without any norm). Batch-64 graph step, variants
# alternating, three rounds; batch 16 norm vs base, two rounds.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 200 $B/itera_device_tests --gtest_filter='llm_fused_products.*:llm_decode_fusions.*' > $OUT/tests.log 2>&1
echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |^\[  FAILED|normalised|against" $OUT/tests.log | head -40
ITERA_X_W_FIRST=1 ITERA_LLM_GATE_UP_NORM=0 timeout 60 $B/itera_device_tests --gtest_filter='llm_fused_products.gate_up_swiglu_matches*' > $OUT/tests_wfirst.log 2>&1
echo "w_first gate/up test rc=$?"
t() {  # name batch env...
  local name=$1 b=$2; shift 2
  local f=$OUT/t_${name}_b$b.log
  env "$@" ITERA_LLM_TIMING_BATCH=$b timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  local n=$(grep -A10 "graph step by kernel" $f | tail -9 | awk '$2 ~ /^[0-9]+$/ {printf "%s:%s=%s ", substr($1,1,20), $2, $3}')
  echo "$name b$b graph $g ms  $n" | tee -a $OUT/ab.txt
}
for r in 1 2 3; do
  t base 64 ITERA_LLM_GATE_UP_NORM=0; t norm 64 ITERA_LLM_GATE_UP_NORM=1
  t wfirst 64 ITERA_LLM_GATE_UP_NORM=0 ITERA_X_W_FIRST=1
  t pn1 64 ITERA_LLM_GATE_UP_NORM=0 ITERA_X_POST_NORM=1; t pn3 64 ITERA_LLM_GATE_UP_NORM=0 ITERA_X_POST_NORM=3
done
for r in 1 2; do t base 16 ITERA_LLM_GATE_UP_NORM=0; t norm 16 ITERA_LLM_GATE_UP_NORM=1; done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
echo; sort -s -k2,2 -k1,1 $OUT/ab.txt | cut -c1-330

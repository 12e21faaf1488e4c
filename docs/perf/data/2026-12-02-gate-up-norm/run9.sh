#!/usr/bin/env bash
# Session 27, call 9: o_proj's product trial timed with the normalising gate/up after each
# candidate (ITERA_X_PAIR_GATE_UP=1, temporary) against alone (0): the batch-64 graph step
# alternating, three rounds (trial picks logged); the engine test with it on first.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
ITERA_X_PAIR_GATE_UP=1 timeout 60 $B/itera_device_tests --gtest_filter='llm_decode_fusions.engine_in_parts*' > $OUT/test.log 2>&1
echo "engine test rc=$?"
t() {  # switch
  local f=$OUT/t_p$1.log
  ITERA_LLM_TRIAL_LOG=1 ITERA_X_PAIR_GATE_UP=$1 ITERA_LLM_TIMING_BATCH=64 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  local o=$(grep "product trial, o_proj" $f | tail -1 | grep -oE "picked #[0-9]+")
  local n=$(grep -A10 "graph step by kernel" $f | tail -9 | awk '$2 ~ /^[0-9]+$/ {printf "%s:%s=%s ", substr($1,1,20), $2, $3}')
  echo "pair=$1 graph $g ms o_proj $o  $n" >> $OUT/ab.txt
}
for r in 1 2 3; do t 0; t 1; done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log
sort -s -k1,1 $OUT/ab.txt | cut -c1-260

#!/usr/bin/env bash
# Session 26, call 5: a probe (temporary) of the fused gate/up's first step: globaltimer stamps of
# four blocks' consumer leaders in the 600th and 1200th launch (start, norm done, past the grid
# barrier with x's boxes asked for, stage 0 full, end), with and without the first step.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
export ITERA_X_KEEP_X=1
for cfg in "1 64" "0 64" "1 8" "0 8"; do
  set -- $cfg
  ITERA_LLM_NORM_IN_GATE_UP=$1 ITERA_LLM_TIMING_BATCH=$2 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/p_n$1_b$2.log 2>&1
  echo "== norm=$1 b$2 graph $(grep -oE 'CUDA graph: [0-9.]+' $OUT/p_n$1_b$2.log | tail -1)"
  grep PROBE $OUT/p_n$1_b$2.log | sort -t' ' -k3,3n -k9,9n | cut -c1-230
done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log

#!/usr/bin/env bash
# run 15: the step kernel's counters zeroed by the embedding launch (ITERA_X_FOLD_CLEAR=1, default)
# against the memset before the kernel (=0): the LLM device tests, then batch-1 graph steps
# alternating, two rounds, bf16 and fp8.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 300 $B/itera_device_tests --gtest_filter='*llm*:-*decode_timing*:*search*' > $OUT/run15_llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/run15_llm_tests.log | head -20
for r in 1 2; do
for w in bf16 fp8_e4m3; do
for f in 1 0; do
  ITERA_X_FOLD_CLEAR=$f ITERA_LLM_TIMING_BATCH=1 ITERA_LLM_TIMING_WEIGHTS=$w timeout 150 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run15_${w}_fold${f}_r$r.log 2>&1
  echo "=== $w fold=$f round $r rc=$? $(grep -E 'CUDA graph:' $OUT/run15_${w}_fold${f}_r$r.log | sed 's/.*CUDA graph: //')"
  grep -E "graph step by kernel|^ +[0-9] " $OUT/run15_${w}_fold${f}_r$r.log | head -5
done; done; done

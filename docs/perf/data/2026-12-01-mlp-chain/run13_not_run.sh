#!/usr/bin/env bash
# Not run (written at the session's end, after the device time): the next session's first call.
# Apply graph_kernel_table_not_run.diff (cupti_timer::keep_kernels and a per-kernel table of four
# CUDA graph replays in the decode timing test), build, bundle build/tests/itera_device_tests into
# bb.tgz (carry it); then: where the batch-64, 16 and 1 graph steps' time goes, kernel by kernel
# (this session's run 12 found no nsys on the GPU machine to trace a graph).
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for batch in 64 16 1; do
  ITERA_LLM_TIMING_BATCH=$batch timeout 120 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run13_b$batch.log 2>&1
  echo "batch $batch rc=$?"; grep -E "CUDA graph:|graph step by kernel" $OUT/run13_b$batch.log
  sed -n '/graph step by kernel/,/decode step by stage/p' $OUT/run13_b$batch.log | head -40
done

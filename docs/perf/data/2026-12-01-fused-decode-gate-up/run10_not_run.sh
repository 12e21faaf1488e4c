#!/usr/bin/env bash
# Not run: where the batch-64 decode attention's ~7 us a layer over its read pattern go (43 us a
# layer against 35 for plain cp.async tiles of the same bytes, docs/perf/2026-12-01-graph-kernels.md).
# Apply attention_ablation_not_run.diff (a temporary ITERA_X_ATTN_ABLATE: 1 no scores/softmax/P V,
# 2 no merge or store, 4 no q or RoPE; results wrong, timing kept), build, bundle the test binary as
# bb.tgz, then: graph steps and the attention's CUPTI time a step at batch 64, each bit set
# alternating with none, two rounds. Revert the diff after.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for r in 1 2; do
  for a in 0 1 2 4 7; do
    ITERA_X_ATTN_ABLATE=$a ITERA_LLM_TIMING_BATCH=64 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/t.log 2>&1
    step=$(grep -oE "CUDA graph: [0-9.]+ ms/step" $OUT/t.log | grep -oE "[0-9.]+")
    att=$(sed -n '/graph step by kernel/,/in order/p' $OUT/t.log | awk '/decode_attention/ {print $3}')
    echo "round $r ablate $a: graph $step ms, attention $att us a step"
  done
done

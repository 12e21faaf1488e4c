#!/usr/bin/env bash
# run 6 (ITERA_LLM_L2_PREFETCH, an experiment): batch-64 decode steps with a second stream
# prefetching into the L2 (evict_last) the layer's first cached K/V positions while qkv runs
# (24 MB) and the first 256 inputs of every gate/up row while o_proj runs (14.7 MB); off against
# on, alternating, three rounds (graph steps and the eager stage table); then the llm device tests
# with it on (a server case runs batch 150)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
for r in 1 2 3; do for p in 0 1; do
  ITERA_LLM_L2_PREFETCH=$p ITERA_LLM_TIMING_BATCH=64 timeout 100 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/b64_p${p}_$r.log 2>&1
  echo "== r$r prefetch=$p"; grep -E "CUDA graph|/qkv|/attention |/o_proj|/gate_up|/down|sum of" $OUT/b64_p${p}_$r.log
done; done
ITERA_LLM_L2_PREFETCH=1 timeout 240 $B/itera_device_tests --gtest_filter='llm*:-*timing*' > $OUT/llm_tests_p1.log 2>&1; echo "llm tests, prefetch on: rc=$?"; tail -1 $OUT/llm_tests_p1.log; grep -E "^\[  FAILED" $OUT/llm_tests_p1.log | head

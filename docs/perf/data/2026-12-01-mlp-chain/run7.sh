#!/usr/bin/env bash
# Run 7: the persistent product-stream probe (tests/device/probe_persistent_products.cu, kept as a
# diff): 32, 4 and 1 layers, then the engine's batch-64 stage table for the products' times by
# cuBLASLt on the same machine, then 32 layers again.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for n in 32 4 1; do
  ITERA_X_PROBE=1 ITERA_X_PROBE_LAYERS=$n timeout 120 $B/itera_device_tests --gtest_filter='llm_probe.*' > $OUT/run7_probe_$n.log 2>&1
  echo "layers $n rc=$?"; grep "probe:" $OUT/run7_probe_$n.log | tail -4
done
ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run7_stages64.log 2>&1
echo "stages rc=$? $(grep -o 'CUDA graph: [0-9.]* ms/step' $OUT/run7_stages64.log) | $(grep -E '/(qkv|o_proj|gate_up|swiglu|down) ' $OUT/run7_stages64.log | awk '{printf "%s %s, ", $1, $3}')"
ITERA_X_PROBE=1 ITERA_X_PROBE_LAYERS=32 timeout 120 $B/itera_device_tests --gtest_filter='llm_probe.*' > $OUT/run7_probe_32b.log 2>&1
echo "layers 32 again rc=$?"; grep "probe:" $OUT/run7_probe_32b.log | tail -3

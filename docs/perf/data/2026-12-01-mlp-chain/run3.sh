#!/usr/bin/env bash
# Run 3: where the MLP chain's time goes (temporary ITERA_X_CHAIN_ABLATE bits: 1 no down phase,
# 2 no fix-ups, 4 no products; results wrong, timing kept), batch 64, eager stage table.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for a in 0 1 2 4 3 5 6 7 0; do
  ITERA_X_CHAIN_ABLATE=$a ITERA_LLM_MLP_CHAIN=5 ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run3_ablate$a.log 2>&1
  echo "ablate $a rc=$? $(grep -o 'CUDA graph: [0-9.]* ms/step' $OUT/run3_ablate$a.log) $(grep -E 'gate_up_down' $OUT/run3_ablate$a.log | tr -s ' ')"
done

#!/usr/bin/env bash
# Run 4: the chain reading the weights from stage images (ITERA_LLM_MLP_CHAIN_TILED=1: one 32 KiB
# bulk copy a stage) against the TMA's boxes of 128-byte rows; the unit test (tiled outputs bit-equal),
# then the ablations of run 3 both ways, alternating, and the chain off.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 120 $B/itera_device_tests --gtest_filter='llm_mlp_chain.*' > $OUT/run4_unit.log 2>&1; unit=$?; echo "unit rc=$unit"
grep -E "Failure|Expected|Which is|differs|PASSED|FAILED|OK \]" $OUT/run4_unit.log | head -20
[ "$unit" = 0 ] || exit 1
for round in 1 2; do
  for a in 7 6 2 0; do
    for tiled in 0 1; do
      f=$OUT/run4_a${a}_t${tiled}_r${round}.log
      ITERA_LLM_MLP_CHAIN_TILED=$tiled ITERA_X_CHAIN_ABLATE=$a ITERA_LLM_MLP_CHAIN=5 ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $f 2>&1
      echo "round $round ablate $a tiled $tiled rc=$? $(grep -o 'CUDA graph: [0-9.]* ms/step' $f) $(grep -E 'gate_up_down' $f | tr -s ' ')"
    done
  done
  f=$OUT/run4_off_r${round}.log
  ITERA_LLM_MLP_CHAIN=0 ITERA_LLM_TIMING_BATCH=64 timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $f 2>&1
  echo "round $round chain off rc=$? $(grep -o 'CUDA graph: [0-9.]* ms/step' $f) $(grep -E 'mlp_block/(gate_up|swiglu|down) ' $f | tr -s ' ' | tr '\n' ' ')"
done

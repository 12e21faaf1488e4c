#!/usr/bin/env bash
# run 6 (9d18a98): a sixth ring slot for the batch-1 decode step. Shared memory holds it only with the
# attention's keys read from L2 (their shared-memory copy dropped) and the norms' scratch in the row
# sums' space, and for bf16 weights only (fp8's larger sums do not fit: that binary's fp8 steps fall
# back to the per-layer kernels). Variants: base (9d18a98), kvl2 (keys from L2, five slots), ring6
# (keys from L2, six slots); three rounds alternating; the decode-step test on ring6 (its bf16 cases;
# its first fp8 case stops it, refused); then the llm device tests on base, the long causal prefill
# test (warp-specialized, three-block, mma.sync) among them
set -uo pipefail
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --rounds 3 base=dt_base kvl2=dt_kvl2 ring6=dt_ring6
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
timeout 100 bb/bin/dt_ring6 --gtest_filter='*decode_step*' > $OUT/step_ring6.log 2>&1; echo "step test ring6 rc=$?"; grep -E "logits one kernel|Failure|refus" $OUT/step_ring6.log | head -8
timeout 240 bb/bin/dt_base --gtest_filter='llm*:-*timing*' > $OUT/tests_base.log 2>&1; echo "llm tests base rc=$?"; tail -1 $OUT/tests_base.log
grep -E "^\[  FAILED|Failure" $OUT/tests_base.log | head; grep -E "against|worst sampled" $OUT/tests_base.log | grep -E "warp-specialized|three|wgmma" | head -16

#!/usr/bin/env bash
# Call 3: the fp8 scales copied by the producer with their tiles (sc, the uncommitted tree on
# 4327f27) against 4327f27 (c8): the decode-step tests on sc, then the graph step, bf16 and fp8,
# two rounds alternating.
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
timeout 150 bb/bin/dt_sc --gtest_filter='*decode_step*' > $OUT/step_test_sc.log 2>&1; echo "step test sc rc=$?"; grep -E "^\[  (PASSED|FAILED) " $OUT/step_test_sc.log
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --rounds 2 --batch 1 c8=dt_c8 sc=dt_sc 2>&1 | tee $OUT/ab.txt | tail -12

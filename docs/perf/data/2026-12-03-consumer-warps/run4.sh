#!/usr/bin/env bash
# Call 4: fp8 weights' attn and act stored as fp16 by their writers, staged as a copy (f16, the
# uncommitted tree on 4327f27) against 4327f27 (c8): the decode-step tests on f16, then the graph
# step, bf16 and fp8, two rounds alternating.
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
timeout 100 bb/bin/dt_f16 --gtest_filter='*decode_step*' > $OUT/step_test_f16.log 2>&1; echo "step test f16 rc=$?"; grep -E "^\[  (PASSED|FAILED|  OK) " $OUT/step_test_f16.log
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --rounds 2 --batch 1 c8=dt_c8 f16=dt_f16 2>&1 | tee $OUT/ab.txt | tail -12

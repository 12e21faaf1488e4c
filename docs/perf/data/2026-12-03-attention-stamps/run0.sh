#!/usr/bin/env bash
# Session 28, call 1 (dcf3564 + the experimental barrier, uncommitted): the batch-1 decode step's
# grid barrier polled by 1 (as before), 2 or 4 warps a block, staggered by STAGGER cycles, and the
# attention's per-kv-head arrival counters moved off the barrier counter's 128-byte line (KVC=32).
# Decode-step test on each; three rounds alternating, bf16 and fp8; traces (phases and barrier exit
# latencies) of base and p4.
set -uo pipefail
tar xJf bb.txz
B=$PWD/bb/bin
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --step-test --rounds 3 \
  base=itera_device_tests \
  kvc=itera_device_tests,ITERA_X_KVC=32 \
  p2=itera_device_tests,ITERA_X_KVC=32,ITERA_X_POLLERS=2,ITERA_X_STAGGER=540 \
  p4=itera_device_tests,ITERA_X_KVC=32,ITERA_X_POLLERS=4,ITERA_X_STAGGER=270
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
for v in "base" "p4 ITERA_X_KVC=32 ITERA_X_POLLERS=4 ITERA_X_STAGGER=270"; do
  set -- $v; n=$1; shift
  for w in bf16 fp8_e4m3; do
    env "$@" ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS=$w timeout 100 $B/itera_device_tests \
      --gtest_filter='*decode_timing_llama*' > $OUT/trace_${n}_$w.log 2>&1
    echo "trace $n $w: $(grep -oE 'CUDA graph: [0-9.]+ ms' $OUT/trace_${n}_$w.log)"
    sed -n '/decode_step phases/,/^attention items, us: own/p' $OUT/trace_${n}_$w.log
  done
done

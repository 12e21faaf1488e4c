#!/usr/bin/env bash
# Session 2026-12-03 (30th), call 1: consumer warps of the batch-1 step kernel, 8 / 12 / 16
# (ITERA_X_STEP_CONSUMERS, one binary each), bf16 and fp8, with the decode-step test on each; then
# last session's prepared ring probe.
D=docs/perf/data/2026-12-03-consumer-warps
tar xJf bb.txz
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --rounds 3 --batch 1 --step-test c8=dt_c8 c12=dt_c12 c16=dt_c16 2>&1 | tee $OUT/ab.txt | tail -40
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
timeout 120 bb/bin/ring_probe > $OUT/ring_probe.txt 2>&1; echo "ring_probe rc=$?"; tail -30 $OUT/ring_probe.txt

#!/usr/bin/env bash
# run 12: the warp-specialized causal prefill attention (ITERA_PREFILL_ATTENTION_WS=1: a TMA
# producer, two consumer warpgroups of 64 rows sharing K and V, turns at the tensor cores): the
# prefill attention tests with it (their kernel comparison then sets it against mma.sync), then the
# 2048-token prefill's stage table with it off and on, alternating
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
ITERA_PREFILL_ATTENTION_WS=1 timeout 90 $B/itera_device_tests --gtest_filter='*causal_prefill*:*long_prefill*:*tiny_matches_cpu*:*fp8_kv_cache_matches*:*tiny_fp16_compute*' > $OUT/tests_ws.log 2>&1; echo "tests ws rc=$?"; tail -1 $OUT/tests_ws.log; grep -E "^\[  FAILED|Failure|worst sampled|normalised difference" $OUT/tests_ws.log | head -16
for r in 1 2; do for v in 0 1; do
  ITERA_PREFILL_ATTENTION_WS=$v ITERA_LLM_PREFILL_TOKENS=2048 timeout 60 $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/prefill_ws${v}_$r.log 2>&1
  echo "== r$r ws=$v rc=$?"; grep -E "/attention |sum of" $OUT/prefill_ws${v}_$r.log
done; done

#!/usr/bin/env bash
# run 13: the warp-specialized prefill attention with and without the consumers' turns at the
# tensor cores (ITERA_X_WS_TURNS), against the three-block kernel (ws=0); the 2048-token prefill's
# stage table, two rounds in rotated order; then the attention tests without turns
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
run() {  # name ws turns round
  ITERA_PREFILL_ATTENTION_WS=$2 ITERA_X_WS_TURNS=$3 ITERA_LLM_PREFILL_TOKENS=2048 timeout 60 $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/prefill_$1_$4.log 2>&1
  echo "== r$4 $1 rc=$?"; grep -E "/attention |gate_up|sum of" $OUT/prefill_$1_$4.log
}
run three 0 1 1; run ws_turns 1 1 1; run ws_free 1 0 1
run ws_free 1 0 2; run three 0 1 2; run ws_turns 1 1 2
ITERA_PREFILL_ATTENTION_WS=1 ITERA_X_WS_TURNS=0 timeout 60 $B/itera_device_tests --gtest_filter='*causal_prefill*' > $OUT/tests_free.log 2>&1; echo "tests free rc=$?"; tail -1 $OUT/tests_free.log; grep -E "normalised difference" $OUT/tests_free.log

#!/usr/bin/env bash
# Session 2026-12-01 (eighteenth), run 8: the order-dependent failure made deterministic? Free
# device memory filled with 0xFF (NaN in every type) before each engine of the test
# (ITERA_TEST_POISON, a debug hook), then the engine's buffers zeroed at birth one at a time
# (ITERA_LLM_DEBUG_ZERO bit i: weights, dequantised, act_codes, act_scales, k_cache, v_cache, x, h,
# qkv, attn, gate_up, act, logits, step_workspace, step_layers): which one's leftovers matter.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
t() {  # label [env...]
  local label=$1; shift
  env "$@" timeout 60 $B/itera_device_tests --gtest_filter='llm_fused_gemv.engine_batch_1*' > /tmp/t.log 2>&1
  { echo "== $label"; cat /tmp/t.log; } >> $OUT/run8_tests.log
  echo "$label: $(grep -E '^\[  PASSED|^\[  FAILED  \] [0-9]' /tmp/t.log | tr '\n' ' ') bad: $(grep 'decode step' /tmp/t.log | grep -v 'error 0\.0' | sed 's/, batch 1 decode step.*error/:/' | sort | uniq -c | tr '\n' ';')"
}
t "no poison"
t "poison" ITERA_TEST_POISON=1
t "poison again" ITERA_TEST_POISON=1
t "poison, all zeroed" ITERA_TEST_POISON=1 ITERA_LLM_DEBUG_ZERO=0x7fff
for i in $(seq 0 14); do t "poison, zeroed bit $i" ITERA_TEST_POISON=1 ITERA_LLM_DEBUG_ZERO=$((1 << i)); done
t "poison, all but k,v cache zeroed" ITERA_TEST_POISON=1 ITERA_LLM_DEBUG_ZERO=$((0x7fff & ~0x30))

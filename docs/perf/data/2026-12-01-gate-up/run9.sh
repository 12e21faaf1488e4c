#!/usr/bin/env bash
# run 9: the staged fused qkv kernel with the block's last tile stored after the loop (no spills)
# against cuBLASLt + RoPE (ITERA_LLM_FUSED_QKV=0): the fused products' tests, then the 2048-token
# prefill's stage table, three rounds in alternating order
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 120 $B/itera_device_tests --gtest_filter='llm_fused*:*long_causal_prefill*' > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -1 $OUT/tests.log; grep -E "^\[  FAILED|Failure" -A4 $OUT/tests.log | head -20
run() {
  ITERA_LLM_FUSED_QKV=$2 ITERA_LLM_PREFILL_TOKENS=2048 timeout 100 $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/prefill_$1_$3.log 2>&1
  echo "== r$3 $1"; grep -E "/qkv|/rope|gate_up|sum of" $OUT/prefill_$1_$3.log
}
run fused 512 1; run unfused 0 1; run unfused 0 2; run fused 512 2; run fused 512 3; run unfused 0 3

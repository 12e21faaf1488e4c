#!/usr/bin/env bash
# run 5: a block's last tile stored by all eleven warps (new) against the epilogue warps alone
# (prev): the fused products' tests, the 2048-token prefill's stage table alternating; the
# batch-64 decode step with the fused gate/up + SwiGLU (ITERA_LLM_FUSED_GATE_UP=64) against
# cuBLASLt and the SwiGLU pass, alternating
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 120 $B/itera_device_tests --gtest_filter='llm_fused*:*long_causal_prefill*:*long_prefill*' > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -1 $OUT/tests.log; grep -E "^\[  FAILED|Failure" -A4 $OUT/tests.log | head -20
for r in 1 2; do for v in prev itera_device_tests; do
  ITERA_LLM_PREFILL_TOKENS=2048 timeout 100 $B/${v/prev/dt_prev} --gtest_filter='*prefill_timing*' > $OUT/prefill_${v}_$r.log 2>&1
  echo "== r$r $v"; grep -E "/qkv|gate_up|sum of|per call" $OUT/prefill_${v}_$r.log
done; done
for r in 1 2; do for g in 0 64; do
  ITERA_LLM_FUSED_GATE_UP=$g ITERA_LLM_TIMING_BATCH=64 timeout 100 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/b64_gu${g}_$r.log 2>&1
  echo "== r$r batch 64 fused_gate_up_from=$g"; grep -E "CUDA graph|gate_up|swiglu|down |sum of" $OUT/b64_gu${g}_$r.log
done; done

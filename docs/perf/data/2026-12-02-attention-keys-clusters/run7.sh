#!/usr/bin/env bash
# Session 24, call 7: the warp-specialized prefill attention with key tiles of 128
# (FlashAttention-3's; setmaxnreg 40/232, two-stage K and V rings; ITERA_PREFILL_ATTENTION_KEYS_128),
# uncommitted: the causal-prefill test on every kernel (the new one among them), the ViT attention
# tests (the shared helpers now take the tile width), then the 2048-token stage table A/B.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 120 $B/itera_device_tests --gtest_filter='llm_cuda.long_causal_prefill_on_each_attention_kernel:vit_device_test.*attention*' > $OUT/tests.log 2>&1
echo "tests rc=$?"; grep -E "causal prefill of|against|^\[  (PASSED|FAILED) |FAILED  \]|OK \]" $OUT/tests.log | head -40
for r in 1 2; do for w in 0 1; do
  ITERA_PREFILL_ATTENTION_KEYS_128=$w ITERA_LLM_PREFILL_TOKENS=2048 timeout 90 $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/table_w${w}_r$r.log 2>&1
  echo "keys128=$w round $r rc=$?: $(grep -E '/attention ' $OUT/table_w${w}_r$r.log | awk '{print "attention",$3,$4}') $(grep -E 'gate_up' $OUT/table_w${w}_r$r.log | awk '{print "gate_up",$3}') $(grep -E 'whole pass' $OUT/table_w${w}_r$r.log | awk '{print "pass",$3,$4}')"
done; done
cd $OUT && tar czf logs.tgz *.log && rm -f *.log

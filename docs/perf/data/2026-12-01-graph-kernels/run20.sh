#!/usr/bin/env bash
# run 20: gate/up and qkv tried again behind o_proj and down (ITERA_LLM_TRIAL_CONTEXT=1, default) against
# their trials alone (=0; both with graph-timed trials): the LLM device tests, then six processes each,
# alternating, batch 64: the graph step each measures and its picks.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 300 $B/itera_device_tests --gtest_filter='*llm*:-*decode_timing*:*search*' > $OUT/run20_llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/run20_llm_tests.log | head -20
for r in 1 2 3 4 5 6; do
for g in 1 0; do
  ITERA_LLM_TRIAL_LOG=1 ITERA_LLM_TRIAL_CONTEXT=$g ITERA_LLM_TIMING_BATCH=64 timeout 200 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run20_g${g}_r$r.log 2>&1
  echo "context $g round $r rc=$? $(grep -E 'CUDA graph:' $OUT/run20_g${g}_r$r.log | sed 's/.*CUDA graph: //' | cut -d, -f1) | $(grep -oE 'graph step by kernel[^:]*: [0-9.]+ us' $OUT/run20_g${g}_r$r.log | sed 's/.*: //') | picks $(grep -oE '^llm product trial, [a-z_]+ .*picked #[0-9]+' $OUT/run20_g${g}_r$r.log | sed -E 's/llm product trial, ([a-z_]+) .*picked (#[0-9]+)/\1 \2/' | tr '\n' ' ')"
  [ $r -le 2 ] && grep -E "^llm product trial, (qkv|gate_up)[ _]" $OUT/run20_g${g}_r$r.log | cut -c1-200
done; done

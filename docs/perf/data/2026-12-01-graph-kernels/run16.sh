#!/usr/bin/env bash
# run 16: the wide decode attention issues its first tiles before griddepcontrol.wait, launched with
# PDL (ITERA_X_ATTN_PDL=1, default) against a plain launch (=0): the LLM device tests, then batch
# 64 and 16 graph steps alternating, two rounds. (The script as it ran, re-typed from the session
# record: the file itself was deleted before it was copied here.)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
timeout 300 $B/itera_device_tests --gtest_filter='*llm*:-*decode_timing*:*search*' > $OUT/run16_llm_tests.log 2>&1
echo "llm tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]" $OUT/run16_llm_tests.log | head -20
for r in 1 2; do
for b in 64 16; do
for f in 1 0; do
  ITERA_X_ATTN_PDL=$f ITERA_LLM_TIMING_BATCH=$b timeout 150 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run16_b${b}_pdl${f}_r$r.log 2>&1
  echo "=== batch $b pdl=$f round $r rc=$? $(grep -E 'CUDA graph:' $OUT/run16_b${b}_pdl${f}_r$r.log | sed 's/.*CUDA graph: //')"
  grep -E "graph step by kernel|decode_attention_wide|rope_store|^ +[2-5] " $OUT/run16_b${b}_pdl${f}_r$r.log | head -7
done; done; done

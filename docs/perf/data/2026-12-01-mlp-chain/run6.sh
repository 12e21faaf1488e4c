#!/usr/bin/env bash
# Run 6: an L2 access policy window marking each cuBLASLt product's weights streaming
# (ITERA_X_L2_WINDOW=1, temporary), off and on alternating: batch 64 and 16 graph steps and stage
# tables (the chain off), then the bench at batch 64 both ways.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for round in 1 2 3; do
  for batch in 64 16; do
    for w in 0 1; do
      f=$OUT/run6_b${batch}_w${w}_r${round}.log
      ITERA_X_L2_WINDOW=$w ITERA_LLM_TIMING_BATCH=$batch timeout 90 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $f 2>&1
      echo "round $round batch $batch window $w rc=$? $(grep -o 'CUDA graph: [0-9.]* ms/step' $f) | $(grep -E '/(qkv|attention|o_proj|gate_up|swiglu|down|lm_head) ' $f | awk '{printf "%s %s, ", $1, $3}')"
    done
  done
done
for w in 0 1; do
  ITERA_X_L2_WINDOW=$w timeout 150 $B/itera bench llm --max-time 10 -a batch=64 -o $OUT/run6_bench_w$w.jsonl > $OUT/run6_bench_w$w.md 2>&1
  echo "bench window $w rc=$? $(grep -o '"name":"throughput/decode_tokens_per_s","value":[0-9.]*' $OUT/run6_bench_w$w.jsonl)"
done

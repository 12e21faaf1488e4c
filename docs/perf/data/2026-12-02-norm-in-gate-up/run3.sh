#!/usr/bin/env bash
# Session 26, call 3 (norm-in-gate-up reverted): x's rows stored with an L2 evict_last policy by
# add_rms_norm (ITERA_X_KEEP_X=1, temporary) against not: the batch-64 graph step, four rounds
# alternating, batch 16 and 32 two rounds, the b64 bench both ways twice.
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
t() {  # keep batch
  local f=$OUT/t_k$1_b$2.log
  ITERA_X_KEEP_X=$1 ITERA_LLM_TIMING_BATCH=$2 timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' >> $f 2>&1
  local g=$(grep -oE "CUDA graph: [0-9.]+" $f | tail -1 | awk '{print $3}')
  local n=$(grep -A9 "graph step by kernel" $f | tail -9 | awk '$2 ~ /^[0-9]+$/ {printf "%s:%s=%s ", substr($1,1,24), $2, $3}')
  echo "keep=$1 b$2 graph $g ms  $n" | tee -a $OUT/ab.txt
}
for r in 1 2 3 4; do t 0 64; t 1 64; done
for r in 1 2; do for b in 16 32; do t 0 $b; t 1 $b; done; done
i=0
for p in 0 1 0 1; do
  i=$((i+1))
  ITERA_X_KEEP_X=$p timeout 100 $B/itera bench llm --max-time 10 -a batch=64 -o $OUT/b64_k${p}_$i.jsonl >> $OUT/b64_k${p}_$i.md 2>&1
  echo "bench b64 keep=$p rc=$?: $(grep -A1 '^| ok' $OUT/b64_k${p}_$i.md | tail -1 | tr -s ' ' | cut -c1-120)"
done
cd $OUT && tar czf logs.tgz *.log *.md *.jsonl && rm -f *.log *.md *.jsonl
echo; sort -s -k2,2 -k1,1 $OUT/ab.txt | cut -c1-400

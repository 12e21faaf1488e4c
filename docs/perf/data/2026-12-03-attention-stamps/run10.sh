#!/usr/bin/env bash
# Session 29, call 10 (d57423b, the session's last code): bench at batch 1 (bf16, fp8 weights) and
# 64 (bf16), the issue-3 figures of this commit (what the session's device time left allowed).
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
timeout 100 bb/bin/itera bench llm --max-time 10 -a batch=1 -a weights=bf16,fp8_e4m3 -o $OUT/b1.jsonl > $OUT/b1.txt 2>&1
echo "b1 rc $?"
timeout 80 bb/bin/itera bench llm --max-time 10 -a batch=64 -a weights=bf16 -o $OUT/b64.jsonl > $OUT/b64.txt 2>&1
echo "b64 rc $?"
for f in b1 b64; do grep -oE '"(throughput/decode_tokens_per_s|latency/tpot)","value":[0-9.e-]+|"name":"decode/copy.d2d[^}]*' $OUT/$f.jsonl; done

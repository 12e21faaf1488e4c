#!/usr/bin/env bash
# Session 2026-12-01 (sixteenth), run 3: add_rms_norm issuing every load before its stores, and the
# norm kernel loading its weight before the block's reduction (both paths). The split tests and
# the llm device tests; the stage tables at batch 64, 32, 16 with the split on and off,
# alternating; the bench at batch 64 both ways.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 200 $B/itera_device_tests --gtest_filter='llm*:*split_residual*:-*timing*' > $OUT/run3_tests.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/run3_tests.log; grep -E "^\[  FAILED" $OUT/run3_tests.log | head
st() { grep -E "CUDA graph|/norm |/residual_norm|/o_proj|/down |/qkv|/gate_up|/swiglu|/rope|/attention " "$1" | sed 's/llama-3.1-8b bf16 decode, bf16 compute, bf16 KV cache, //'; }
for b in 64 32 16; do
  for split in 1 0 1 0; do
    ITERA_LLM_SPLIT_RESIDUAL=$split ITERA_LLM_TIMING_BATCH=$b timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
    { echo "== batch $b split $split"; cat /tmp/t.log; } >> $OUT/run3_stages.log
    echo "== batch $b split $split"; st /tmp/t.log
  done
done
s() { python3 - "$1" <<'PY'
import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l)
    if d.get('type')!='case' or 'model' not in d.get('axes',{}): continue
    m={x['name']:x.get('value') for x in d['metrics']}
    keys=[k for k in m if any(t in k for t in ('tpot','decode_tokens_per_s','throughput/decode_bytes','utilisation/decode'))]
    a=d['axes']
    print(d.get('status'), d.get('message','')[:200], {x: a.get(x) for x in ('batch','weights')}, {k: round(m[k],5) if isinstance(m[k],float) else m[k] for k in keys}, 'n', d.get('stats',{}).get('device',{}).get('count'))
PY
}
for split in 1 0; do
  ITERA_LLM_SPLIT_RESIDUAL=$split timeout 100 $B/itera bench llm --max-time 10 -a batch=64 -o $OUT/run3_bench_b64_split$split.jsonl > /dev/null 2>&1; echo "b64 split=$split rc=$?"
  s $OUT/run3_bench_b64_split$split.jsonl
done

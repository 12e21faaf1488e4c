#!/usr/bin/env bash
# Session 2026-12-01 (sixteenth), run 2: the residual products in two k-parts with the add and the
# next norm in one kernel (k::add_rms_norm). Its tests and every device test; the batch-64 (and
# 16, 32) stage tables with the split on and off (ITERA_LLM_SPLIT_RESIDUAL=0), alternating; the
# bench at batch 64 both ways.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
$B/itera_device_tests --gtest_filter='*split_residual*' > $OUT/run2_split_tests.log 2>&1; echo "split tests rc=$?"
grep -E "normalised|OK|FAILED|Failure" $OUT/run2_split_tests.log | head -30
timeout 300 $B/itera_device_tests --gtest_filter='-*timing*:*split_residual*' > $OUT/run2_device_tests.log 2>&1; echo "device tests rc=$?"; tail -2 $OUT/run2_device_tests.log; grep -E "^\[  FAILED" $OUT/run2_device_tests.log | head
st() { grep -E "CUDA graph|/norm |/residual_norm|/o_proj|/down |/qkv|/gate_up|/swiglu|/rope" "$1" | sed 's/llama-3.1-8b bf16 decode, bf16 compute, bf16 KV cache, //'; }
i=0
for b in 64 32 16; do
  for split in 1 0 1 0; do
    i=$((i+1))
    ITERA_LLM_SPLIT_RESIDUAL=$split ITERA_LLM_TIMING_BATCH=$b timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run2_b${b}_$(printf %02d $i)_split${split}.log 2>&1
  done
done
for f in $OUT/run2_b*_split*.log; do echo "== $(basename $f)"; st $f; done
s() { python3 - "$1" <<'PY'
import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l)
    if d.get('type')!='case' or 'model' not in d.get('axes',{}): continue
    m={x['name']:x.get('value') for x in d['metrics']}
    keys=[k for k in m if any(t in k for t in ('tpot','decode_tokens_per_s','throughput/decode_bytes','utilisation'))]
    a=d['axes']
    print(d.get('status'), d.get('message','')[:200], {x: a.get(x) for x in ('batch','weights')}, {k: round(m[k],5) if isinstance(m[k],float) else m[k] for k in keys}, 'n', d.get('stats',{}).get('device',{}).get('count'))
PY
}
for split in 1 0; do
  ITERA_LLM_SPLIT_RESIDUAL=$split timeout 100 $B/itera bench llm --max-time 10 -a batch=64 -o $OUT/run2_bench_b64_split$split.jsonl > /dev/null 2>&1; echo "b64 split=$split rc=$?"
  s $OUT/run2_bench_b64_split$split.jsonl
done

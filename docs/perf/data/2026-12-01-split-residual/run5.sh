#!/usr/bin/env bash
# Session 2026-12-01 (sixteenth), run 5: RoPE and the cache store inside the tensor-core decode
# attention (k::decode_rope_attention), the wide kernel from 32 pairs. The fusion tests and the llm
# device tests; stage tables at batch 64, 32, 16 with ITERA_LLM_ROPE_IN_ATTENTION=1 and 0,
# alternating; the bench at batch 64.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 60 $B/itera_device_tests --gtest_filter='*decode_fusions*' > $OUT/run5_fusion_tests.log 2>&1; echo "fusion tests rc=$?"
grep -E "normalised|OK \]|FAILED|Failure|Expected|Which is|equal" $OUT/run5_fusion_tests.log | head -40
timeout 240 $B/itera_device_tests --gtest_filter='llm*:-*timing*' > $OUT/run5_llm_tests.log 2>&1; echo "llm tests rc=$?"; tail -2 $OUT/run5_llm_tests.log; grep -E "^\[  FAILED" $OUT/run5_llm_tests.log | head
st() { grep -E "CUDA graph|/attention |/rope" "$1" | sed 's/llama-3.1-8b bf16 decode, bf16 compute, bf16 KV cache, //'; }
one() {  # label, env...
  local label=$1; shift
  env "$@" timeout 60 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > /tmp/t.log 2>&1
  { echo "== $label"; cat /tmp/t.log; } >> $OUT/run5_stages.log
  echo "== $label"; st /tmp/t.log
}
for b in 64 32 16; do
  for rep in 1 2; do
    one "batch $b rope in attention" ITERA_LLM_TIMING_BATCH=$b
    one "batch $b rope apart" ITERA_LLM_ROPE_IN_ATTENTION=0 ITERA_LLM_TIMING_BATCH=$b
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
timeout 120 $B/itera bench llm --max-time 10 -a batch=64 -o $OUT/run5_bench_b64.jsonl > /dev/null 2>&1; echo "b64 rc=$?"
s $OUT/run5_bench_b64.jsonl

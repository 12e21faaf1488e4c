#!/usr/bin/env bash
# run 8: both wgmma attention kernels on one tile_pass helper (the causal kernel's code deduplicated):
# the attention, prefill and ViT device tests; the ViT's streaming wgmma attention (CLIP-336, 577
# tokens, batch 32) before (c3: the commit before) and after; the 2048-token prefill's stage table
# and bench on the final binary
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 150 $B/dt_final --gtest_filter='*attention*:*prefill*:vit*:-*timing*' > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -1 $OUT/tests.log; grep -E "^\[  FAILED|normalised difference" $OUT/tests.log | head -8
for r in 1 2; do for v in c3 final; do
  timeout 60 $B/itera_$v bench vision_encoder --no-ceilings --max-time 4 -a preset=clip-vit-large-patch14-336 -a batch=32 -a check_images=0 -o $OUT/vit_${v}_$r.jsonl > $OUT/vit_${v}_$r.md 2>&1
  echo "vit r$r $v: $(python3 -c "
import json,sys
for l in open('$OUT/vit_${v}_$r.jsonl'):
    d=json.loads(l)
    if d.get('type')!='case': continue
    m={x['name']:x.get('value') for x in d['metrics']}
    st={s['path']:s['device_ns']/s['calls']*1e-3 for s in d.get('stages',[]) if 'attention' in s['path']}
    print(d['status'], {k:round(v,1) for k,v in m.items() if 'images' in k or 'attention' in k}, {k:round(v,1) for k,v in st.items()})
")"
done; done
ITERA_LLM_PREFILL_TOKENS=2048 timeout 100 $B/dt_final --gtest_filter='*prefill_timing*' > $OUT/prefill.log 2>&1
grep -E "/attention |sum of|per call" $OUT/prefill.log
timeout 100 $B/itera_final bench llm --max-time 8 -a prompt=2048 -a output=1 -o $OUT/bench_prefill.jsonl > $OUT/bench_prefill.md 2>&1; echo "prefill bench rc=$?"
python3 -c "
import json
for l in open('$OUT/bench_prefill.jsonl'):
    d=json.loads(l)
    if d.get('type')=='case' and 'model' in d.get('axes',{}):
        m={x['name']:x.get('value') for x in d['metrics']}
        print({k:m[k] for k in ('latency/ttft','throughput/prefill_flops','utilisation/prefill/gemm.bf16')})
"

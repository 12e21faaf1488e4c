#!/usr/bin/env bash
# the session's last code: every device test, ViT-L/14 b128 with the ceilings, llm bf16 and fp8 at batch 1
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
N=$PWD/bb/bin/itera_device_tests; I=$PWD/bb/bin/itera
timeout 300 $N >$OUT/device_tests.log 2>&1
echo "device tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/device_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/device_tests.log | head -20
timeout 200 $I bench vision_encoder --max-time 6 --axis preset=clip-vit-large-patch14 --axis batch=128 --out $OUT/vit.jsonl >/dev/null 2>&1; echo "vit rc $?"
for w in bf16 fp8_e4m3; do timeout 200 $I bench llm --axis batch=1 --axis weights=$w --out $OUT/llm_$w.jsonl >/dev/null 2>&1; echo "llm $w rc $?"; done
python3 - <<'PY'
import json, os, glob
O=os.environ['OUT']
for f in sorted(glob.glob(O+'/*.jsonl')):
  for line in open(f):
    d=json.loads(line)
    if d.get('type')!='case' or not d.get('metrics'): continue
    m={x['name']:x['value'] for x in d['metrics']}
    keys=[k for k in m if any(s in k for s in ('tpot','decode_tokens','quality','images_per_s','encoder_gemm/gemm','decode_bandwidth','prefill_tokens'))]
    print(os.path.basename(f), d.get('status'), " ".join(f"{k}={m[k]:.4g}" for k in keys)[:700])
    t=d.get('throttle') or {}
    print('   clocks', t.get('sm_clock_mhz_min'), t.get('sm_clock_mhz_max'), t.get('reasons'))
PY

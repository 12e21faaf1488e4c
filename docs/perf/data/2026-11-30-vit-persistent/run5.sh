#!/usr/bin/env bash
# every device test, then ViT-L/14 b128 twice with the ceilings
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
T=$PWD/bb/bin/itera_device_tests; I=$PWD/bb/bin/itera
timeout 300 $T >$OUT/device_tests.log 2>&1
echo "device tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/device_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/device_tests.log | head -20
for r in a b; do
  timeout 200 "$I" bench vision_encoder --max-time 6 --axis preset=clip-vit-large-patch14 --axis batch=128 --out "$OUT/vit_final_$r.jsonl" >$OUT/vit_final_$r.md 2>&1; echo "bench $r rc $?"
done
python3 - <<'PY'
import json, os, glob
for f in sorted(glob.glob(os.path.join(os.environ['OUT'], 'vit_final_*.jsonl'))):
  for line in open(f):
    d = json.loads(line)
    if d.get('type') != 'case' or d.get('workload') != 'vision_encoder': continue
    m = {x['name']: x['value'] for x in d['metrics']}
    t = d['throttle']
    per = {s['path'].split('/')[-1]: s['device_ns'] / s['calls'] / 1e3 for s in d.get('stages') or [] if s.get('calls') and s['depth'] == 1}
    keys = [k for k in m if 'gemm' in k or 'attention' in k or 'images_per_s' in k]
    print(os.path.basename(f), " ".join(f"{k}={m[k]:.4g}" for k in keys), f"clk {t.get('sm_clock_mhz_min')}-{t.get('sm_clock_mhz_max')} {t.get('reasons')}")
    print("   " + " ".join(f"{k} {v:.1f}" for k, v in per.items()))
PY

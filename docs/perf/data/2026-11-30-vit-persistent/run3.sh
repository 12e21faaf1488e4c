#!/usr/bin/env bash
# fc1's bias one tile ahead: vit tests, A/B against the trimmed kernel without it
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
T=$PWD/bb/bin/itera_device_tests; I=$PWD/bb/bin/itera; B=$PWD/bb/bin/itera_trim
timeout 200 $T --gtest_filter='vit*' >$OUT/tests_vit3.log 2>&1
echo "vit device tests rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/tests_vit3.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/tests_vit3.log | head -20
bench() { timeout 150 "$1" bench vision_encoder --no-ceilings --max-time 4 --axis preset=clip-vit-large-patch14 --axis batch=128 --out "$OUT/vit_$2.jsonl" >/dev/null 2>&1; echo "$2 rc $?"; }
for r in a b c; do
  bench $I pref_$r
  bench $B trim_$r
done
python3 - <<'PY'
import json, os, glob
for f in sorted(glob.glob(os.path.join(os.environ['OUT'], 'vit_*.jsonl'))):
  for line in open(f):
    d = json.loads(line)
    if d.get('type') != 'case' or d.get('workload') != 'vision_encoder': continue
    m = {x['name']: x['value'] for x in d['metrics']}
    t = d['throttle']
    per = {s['path'].split('/')[-1]: s['device_ns'] / s['calls'] / 1e3 for s in d.get('stages') or [] if s.get('calls') and s['depth'] == 1}
    print(f"{os.path.basename(f)[4:-6]:8s} enc {m['throughput/encoder_images_per_s']:.0f} err {d['verification']['error']:.4f} clk {t.get('sm_clock_mhz_min')}-{t.get('sm_clock_mhz_max')} | " + " ".join(f"{k} {v:.1f}" for k, v in per.items()))
PY

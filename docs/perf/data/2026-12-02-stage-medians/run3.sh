#!/usr/bin/env bash
# Session 25, call 3, on e972bb3 (median-repetition figures, the ViT's too): every device test, then the
# 2048-token prefill held 4 s three more rounds (median and mean against the ceiling held alike).
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 330 $B/itera_device_tests > $OUT/device_tests.log 2>&1
echo "device tests rc=$?"; grep -E "^\[  (PASSED|FAILED|SKIPPED) |FAILED  \]" $OUT/device_tests.log | head
for r in 3 4 5; do
  timeout 60 $B/itera bench llm --min-time 4 --max-time 4 -a prompt=2048 -a output=1 -o $OUT/held_r$r.jsonl > $OUT/held_r$r.md 2>&1
  echo "held round $r rc=$?"
done
python3 /dev/stdin "$OUT" <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(os.path.join(sys.argv[1], 'held_*.jsonl'))):
    ceil = {}
    for line in open(f):
        j = json.loads(line)
        if j.get('type') == 'ceiling': ceil[j['key']] = j['value']
        if j.get('type') != 'case' or j.get('workload') != 'llm': continue
        m = {x['name']: x['value'] for x in j['metrics']}
        pf, t, tm, g = m['throughput/prefill_flops'], m['latency/ttft'], m['latency/ttft_mean'], ceil['gemm.bf16']
        print(f"{os.path.basename(f)}: ttft {t*1e3:.2f} ms (mean {tm*1e3:.2f}), {pf/1e12:.1f} TFLOP/s = {100*pf/g:.1f}% of {g/1e12:.1f} (by mean {100*pf*t/tm/g:.1f}%), {len(j['device_ns']) if 'device_ns' in j else j['stats']['device']['count']} samples")
PY
cd $OUT && gzip device_tests.log && tar czf logs.tgz *.md *.jsonl device_tests.log.gz && rm -f *.md *.jsonl device_tests.log.gz

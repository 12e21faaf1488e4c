#!/usr/bin/env bash
# run 3: the qkv product with bias, RoPE and the cache store fused (qkv_rope_store) beside the
# fused gate/up: the fused products' tests and every llm device test; the 2048-token prefill's stage
# table with neither, gate/up only, both (alternating, two rounds); the prefill bench (4 s fixed)
# with neither and both
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 240 $B/itera_device_tests --gtest_filter='llm*:vit_gemm*:-*timing*' > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -1 $OUT/tests.log; grep -E "^\[  FAILED|Failure|error:" -A4 $OUT/tests.log | head -40
run_prefill() {  # name gu qkv round
  ITERA_LLM_FUSED_GATE_UP=$2 ITERA_LLM_FUSED_QKV=$3 ITERA_LLM_PREFILL_TOKENS=2048 timeout 100 $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/prefill_$1_$4.log 2>&1
  echo "== r$4 $1"; grep -E "qkv|rope|gate_up|swiglu|sum of|per call" $OUT/prefill_$1_$4.log
}
for r in 1 2; do run_prefill none 0 0 $r; run_prefill gu 512 0 $r; run_prefill both 512 512 $r; done
for r in 1 2; do for v in none both; do
  if [ $v = none ]; then gu=0; qkv=0; else gu=512; qkv=512; fi
  ITERA_LLM_FUSED_GATE_UP=$gu ITERA_LLM_FUSED_QKV=$qkv timeout 120 $B/itera bench llm --no-ceilings --min-time 4 --max-time 4 -a prompt=2048 -a output=1 -o $OUT/bench_${v}_$r.jsonl > /dev/null 2>&1; echo "bench $v r$r rc=$?"
  python3 -c "
import json
for l in open('$OUT/bench_${v}_$r.jsonl'):
    d=json.loads(l)
    if d.get('type')=='case' and 'model' in d.get('axes',{}):
        m={x['name']:x.get('value') for x in d['metrics']}
        s=d['stats']['device']
        print('$v r$r', 'ttft %.3f ms' % (m['latency/ttft']*1e3), 'n', s['count'], 'min %.2f med %.2f max %.2f' % (s['min']/1e6, s['median']/1e6, s['max']/1e6), 'TF %.1f' % (m['throughput/prefill_flops']/1e12), d['throttle'].get('sm_clock_mhz_min'), d['throttle'].get('sm_clock_mhz_max'), d['throttle'].get('power_w_max'))
        print(d['details'].get('precision.as_run','')[:400])
"
done; done

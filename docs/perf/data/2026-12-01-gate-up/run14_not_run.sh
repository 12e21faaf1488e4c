#!/usr/bin/env bash
# run 14: the warp-specialized prefill attention as the default (its turns taken out): the llm
# device tests; then the prefill bench held 4 s with it and with the three-block kernel
# (ITERA_PREFILL_ATTENTION_WS=0), alternating
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for r in 1; do for v in 1 0; do
  ITERA_PREFILL_ATTENTION_WS=$v timeout 40 $B/itera bench llm --no-ceilings --min-time 4 --max-time 4 -a prompt=2048 -a output=1 -o $OUT/bench_ws${v}.jsonl > /dev/null 2>&1; echo "bench ws=$v rc=$?"
  python3 -c "
import json
for l in open('$OUT/bench_ws${v}.jsonl'):
    d=json.loads(l)
    if d.get('type')=='case' and 'model' in d.get('axes',{}):
        m={x['name']:x.get('value') for x in d['metrics']}; s=d['stats']['device']
        print('ws=$v ttft %.3f ms n %d min %.2f med %.2f TF %.1f' % (m['latency/ttft']*1e3, s['count'], s['min']/1e6, s['median']/1e6, m['throughput/prefill_flops']/1e12), d['throttle'].get('sm_clock_mhz_min'), d['throttle'].get('power_w_max'))
"
done; done
timeout 150 $B/itera_device_tests --gtest_filter='llm*:-*timing*' > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -1 $OUT/tests.log; grep -E "^\[  FAILED|Failure|normalised difference" $OUT/tests.log | head -12

#!/usr/bin/env bash
# run 3 (allow_dynamic_shared keeps the largest opt-in): the new regression test on the binary
# before the fix (must fail) and after; every device test after the fix; itera bench llm at batch 1
# with the three weight / LM head cases (the third failed in run 2 on the old opt-in cache)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
F='*long_context_after_a_short_one*'
timeout 60 $B/dt_old --gtest_filter="$F" > $OUT/regression_old.log 2>&1; echo "regression test, before the fix: rc=$?"; grep -E "Failure|fit an SM|PASSED|FAILED" $OUT/regression_old.log | head -4
timeout 60 $B/itera_device_tests --gtest_filter="$F" > $OUT/regression_new.log 2>&1; echo "regression test, after: rc=$?"; tail -1 $OUT/regression_new.log
timeout 330 $B/itera_device_tests --gtest_filter='-*timing*' > $OUT/device_tests.log 2>&1; echo "device tests rc=$?"; tail -2 $OUT/device_tests.log; grep -E "^\[  FAILED" $OUT/device_tests.log | head
timeout 200 $B/itera bench llm --max-time 15 -a batch=1 -a weights=bf16,fp8_e4m3 -a lm_head=16bit,fp8_e4m3 -o $OUT/bench_b1.jsonl > $OUT/bench_b1.md 2>&1; echo "b1 rc=$?"
python3 - $OUT/bench_b1.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    d=json.loads(l)
    if d.get('type')!='case' or 'model' not in d.get('axes',{}): continue
    m={x['name']:x.get('value') for x in d['metrics']}
    keys=[k for k in m if any(t in k for t in ('tpot','output_tokens_per_s','throughput/bytes','decode_tokens_per_s','quality/logits_rel','quality/top1'))]
    a=d['axes']
    print(d.get('status'), d.get('message','')[:300], {x: a.get(x) for x in ('batch','weights','lm_head')}, {k: round(m[k],5) for k in keys})
PY
tail -8 $OUT/bench_b1.md

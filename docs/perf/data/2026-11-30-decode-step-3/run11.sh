#!/usr/bin/env bash
# session 9, run 11: the K/V copy at the layer's tile `slots` (or its first tile past qkv) (dt_new) against 32d1943 (dt_head): step test, A/B; then the device tests (all but timing), decode timing and the bench on the binary kept (dt_new where it passed and was not slower)
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
L=$OUT/all.log
timeout 100 $B/dt_new --gtest_filter='*decode_step*' >$OUT/t.log 2>&1; rc=$?; echo "dt_new step test rc $rc $(grep -E '^\[  (PASSED|FAILED)' $OUT/t.log | tr '\n' ' ')"; cat $OUT/t.log >>$L
t() { echo "=== $3 $1 $2" >>$L; ITERA_LLM_TIMING_WEIGHTS=$2 ITERA_LLM_TIMING_BATCH=1 timeout 60 $B/$1 --gtest_filter='*decode_timing_llama*' >$OUT/t.log 2>&1; cat $OUT/t.log >>$L
  grep -E 'CUDA graph' $OUT/t.log | tail -1 | sed 's/.*CUDA graph: \([0-9.]*\) ms.*/\1/'; }
H=0; N=0
for r in 1 2; do for w in fp8_e4m3 bf16; do
  h=$(t dt_head $w head$r); n=$(t dt_new $w new$r); echo "$w head $h new $n"
  H=$(python3 -c "print($H+$h)"); N=$(python3 -c "print($N+$n)")
done; done
K=head; if [ $rc -eq 0 ] && python3 -c "import sys; sys.exit(0 if $N <= $H else 1)"; then K=new; fi
echo "kept: $K (sum head $H, new $N)"
timeout 240 $B/dt_$K --gtest_filter='-*timing*' >$OUT/device_tests.log 2>&1
echo "device tests ($K) rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' $OUT/device_tests.log | tr '\n' ' ')"
grep -E "^\[  FAILED|Failure" $OUT/device_tests.log | head -10
timeout 150 $B/itera_$K bench llm --max-time 15 --axis batch=1 --axis weights=bf16,fp8_e4m3 --out $OUT/bench.jsonl >$OUT/bench.log 2>&1
echo "bench ($K) rc $?"; grep -E "copy.d2d" $OUT/bench.log | head -1
python3 - "$OUT/bench.jsonl" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get('workload') != 'llm': continue
    m = {x['name']: x['value'] for x in r['metrics']}
    print(r['axes']['weights'], 'tpot %.4f ms' % (m['latency/tpot'] * 1e3), 'tok/s %.1f' % m['throughput/decode_tokens_per_s'],
          'GB/s %.0f' % (m['throughput/decode_bytes'] / 1e9), 'of copy %.3f' % m['utilisation/decode/copy.d2d'],
          'logits err %s top1 %s' % (m.get('quality/logits_rel_error'), m.get('quality/top1_agreement')))
PY
rm -f $OUT/t.log

#!/usr/bin/env bash
# Session 2026-12-01 (seventeenth), run 9: is it power? The batch-64 bench with o_proj's algorithm
# by the trial, forced to #3 (run 5's fast step) and to #5 (its slow one), twice, while nvidia-smi
# samples power, SM clock and the power-cap throttle every 50 ms.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
for round in 1 2; do
  for cfg in trial o_proj=3 o_proj=5; do
    f=$OUT/run9_smi_${cfg}_$round.csv
    nvidia-smi --query-gpu=timestamp,power.draw,clocks.sm,clocks.mem,clocks_event_reasons.sw_power_cap,temperature.gpu --format=csv,noheader,nounits -lms 50 > $f 2>&1 &
    smi=$!
    if [ $cfg = trial ]; then unset ITERA_LLM_TRIAL_FORCE; else export ITERA_LLM_TRIAL_FORCE=$cfg; fi
    timeout 90 $B/itera bench llm --no-ceilings --max-time 8 -a batch=64 -o /tmp/b_${cfg}_$round.jsonl > /tmp/b.md 2>&1
    rc=$?
    kill $smi; wait $smi 2>/dev/null
    tps=$(python3 -c "
import json
for l in open('/tmp/b_${cfg}_$round.jsonl'):
    d=json.loads(l)
    for m in d.get('metrics',[]):
        if m['name']=='throughput/decode_tokens_per_s': print(round(m['value']))
")
    # samples while busy (power above 300 W): mean power, SM clock, share power-capped
    stats=$(awk -F', ' '$2+0>300 {n++; p+=$2; c+=$3; if ($5 ~ /Active/) t++} END {if (n) printf "%d samples, %.0f W, SM %.0f MHz, capped %.0f%%", n, p/n, c/n, 100*t/n}' $f)
    echo "r$round $cfg: rc=$rc decode $tps tok/s | $stats"
  done
done

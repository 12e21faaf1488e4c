#!/usr/bin/env bash
# run 2: Nsight Compute on the fused gate/up kernel and on cuBLASLt's four products of one layer
# (unfused run); then the prefill bench with a fixed measuring time (4 s, so that both variants
# reach the same power state), the fused kernel off and on, alternating
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
S="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis --section LaunchStats"
ITERA_LLM_PREFILL_TOKENS=2048 timeout 150 ncu --clock-control none --kernel-name regex:gate_up_swiglu --launch-skip 10 --launch-count 1 $S $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/ncu_fused.txt 2>&1; echo "ncu fused rc=$?"
ITERA_LLM_FUSED_GATE_UP=0 ITERA_LLM_PREFILL_TOKENS=2048 timeout 200 ncu --clock-control none --kernel-name regex:'nvjet|sm90|gemm|Kernel' --launch-skip 40 --launch-count 4 $S $B/itera_device_tests --gtest_filter='*prefill_timing*' > $OUT/ncu_cublaslt.txt 2>&1; echo "ncu cublaslt rc=$?"
for n in $OUT/ncu_*.txt; do echo "--- $n"; grep -E "^  [a-zA-Z_].*\(|Grid Size|Block Size|Cluster Size|Registers Per|Duration|SM Frequency|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Shared Memory Configuration Size" $n | head -80; done
for r in 1 2; do for v in 0 512; do
  ITERA_LLM_FUSED_GATE_UP=$v timeout 120 $B/itera bench llm --no-ceilings --min-time 4 --max-time 4 -a prompt=2048 -a output=1 -o $OUT/bench_${v}_$r.jsonl > /dev/null 2>&1; echo "bench $v r$r rc=$?"
  python3 -c "
import json
for l in open('$OUT/bench_${v}_$r.jsonl'):
    d=json.loads(l)
    if d.get('type')=='case' and 'model' in d.get('axes',{}):
        m={x['name']:x.get('value') for x in d['metrics']}
        s=d['stats']['device']
        print('fused_from=$v r$r', 'ttft %.3f ms' % (m['latency/ttft']*1e3), 'n', s['count'], 'min %.2f med %.2f max %.2f' % (s['min']/1e6, s['median']/1e6, s['max']/1e6), 'TF %.1f' % (m['throughput/prefill_flops']/1e12), d['throttle'].get('sm_clock_mhz_min'), d['throttle'].get('sm_clock_mhz_max'), d['throttle'].get('power_w_max'))
"
done; done

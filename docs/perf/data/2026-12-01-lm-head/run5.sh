#!/usr/bin/env bash
# run 5 (ce389f6): Nsight Compute on cuBLASLt's batch-64 decode products (llama-3.1-8b, bf16, the
# decode timing test's eager steps): grid, occupancy, DRAM and L2 throughput, warp stalls of
# each product's kernel (qkv, o_proj, gate_up, down), for the next session's stream-K design.
# Caches flushed between passes (ncu's default): weights from DRAM, as in the step.
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
ITERA_LLM_TIMING_BATCH=64 timeout 400 $NCU --clock-control none --kernel-name-base demangled \
  --kernel-name regex:'nvjet|xmma|gemm|cutlass|splitK' --launch-skip 700 --launch-count 12 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section LaunchStats --section Occupancy \
  -o $OUT/b64 -f $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/ncu.log 2>&1
echo "ncu rc=$?"; tail -3 $OUT/ncu.log
$NCU --import $OUT/b64.ncu-rep --page details > $OUT/details_b64.txt 2>&1
$NCU --import $OUT/b64.ncu-rep --page raw --csv --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,sm__warps_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed > $OUT/summary_b64.csv 2>&1
rm -f $OUT/b64.ncu-rep
python3 - $OUT/summary_b64.csv <<'PY'
import csv,sys
rows=list(csv.reader(open(sys.argv[1])))
h=None
for r in rows:
    if 'Kernel Name' in r: h=r; continue
    if h and len(r)==len(h) and r[0].strip('"').isdigit():
        d=dict(zip(h,r))
        print(d.get('Kernel Name','')[:60], {k:d[k] for k in h if k.startswith(('gpu__','launch__','dram__','lts__','sm__'))})
PY
grep -E "^  [a-z_0-9]|Duration|DRAM Throughput|Grid Size|Registers Per|Achieved Occupancy|Theoretical Occupancy|Waves Per SM|L2 Hit Rate|Warp Cycles Per Issued|No Eligible" $OUT/details_b64.txt | head -150

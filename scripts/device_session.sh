#!/usr/bin/env bash
# One GPU-machine session: environment, device tests, timer fidelity under Nsight Compute, the
# recorder's overhead, and the default suite. Built elsewhere and carried as a bundle:
#   ../shared/tools/device-bundle bundle build/itera build/tests/itera_device_tests build/bench/bench_recorder \
#       build/bench/spin_reference_cuda
#   (device) bash scripts/device_session.sh bundle "$OUT"
# Writes at most 8 files under OUT (the device tool brings back 8) and prints a short table last.
set -uo pipefail
bundle=$1 out=$2
export LD_LIBRARY_PATH=$PWD/$bundle/lib:/usr/local/cuda/lib64
bin=$PWD/$bundle/bin
log=$out/session.log
mkdir -p "$out/run"
section() { printf '\n===== %s =====\n' "$*" | tee -a "$log"; }

section nvidia-smi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit,temperature.gpu,pcie.link.gen.current,pcie.link.width.current --format=csv >>"$log" 2>&1
section itera env
"$bin/itera" env >"$out/env.md" 2>>"$log"; echo "exit $?" >>"$log"
section device tests
"$bin/itera_device_tests" >>"$log" 2>&1; echo "device tests exit $?" | tee -a "$log"
section ncu on the spin kernel
if command -v ncu >/dev/null; then
  ITERA_TIMER=cuda_events ncu --clock-control none --print-units base --metrics gpu__time_duration.sum -k regex:spin \
    "$bin/spin_reference_cuda" 3 >"$out/ncu_spin.txt" 2>&1; echo "ncu exit $?" >>"$log"
else echo "ncu not found" >>"$log"; fi
section spin kernel, itera timers
"$bin/spin_reference_cuda" 20 2>&1 | tee -a "$log"
section stage-scope overhead
"$bin/bench_recorder" --benchmark_min_time=0.2 2>&1 | tee -a "$log"
section stage-scope overhead, CUPTI off
ITERA_TIMER=cuda_events "$bin/bench_recorder" --benchmark_min_time=0.2 --benchmark_filter=cuda 2>&1 | tee -a "$log"
section itera run
"$bin/itera" run --quiet --out "$out/run" >/dev/null 2>>"$log"; echo "itera run exit $?" | tee -a "$log"
section summary
[ -f "$out/run/summary.md" ] && grep -E '^\| (copy|gemm)\.' "$out/run/summary.md" | tee -a "$log"
grep -E "PASSED|FAILED|SKIPPED" "$log" | tail -12

#!/usr/bin/env bash
# itera watch and itera doctor on the GPU machine (issue 5; docs/watch.md, docs/doctor.md). Built
# elsewhere and carried as a bundle (no extra binary needed):
#   ../shared/tools/device-bundle bundle build/itera
#   (device) bash scripts/device_watch_doctor.sh bundle "$OUT"
# 1. watches a torch program (3 s of bf16 8192^3 matmuls, then 1.5 s of pinned 1 GiB host-to-device
#    copies that it times itself) at 50 ms, and compares what NVML saw with what the program says;
# 2. checks the exit code pass-through (3, SIGSEGV -> 139, a command that does not exist -> 127);
# 3. runs itera doctor with --require torch,driver,arch,bf16,fp8,triton.
# Writes under OUT: watch.jsonl, watch.timeline.jsonl, watch.md (itera report), program.txt,
# doctor.jsonl, doctor.md, watch_doctor.log; prints a short table last.
set -uo pipefail
bundle=$1 out=$2
export LD_LIBRARY_PATH=$PWD/$bundle/lib:/usr/local/cuda/lib64
itera=$PWD/$bundle/bin/itera
log=$out/watch_doctor.log
mkdir -p "$out"
section() { printf '\n===== %s =====\n' "$*" | tee -a "$log"; }

program=$(cat <<'PY'
import time, torch
d = torch.device("cuda")
a = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
b = torch.randn_like(a)
torch.cuda.synchronize()
t0 = time.time(); n = 0
while time.time() - t0 < 3.0:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize(); n += 10
mm_s = time.time() - t0
host = torch.empty(1 << 30, dtype=torch.uint8, pin_memory=True)
dev = torch.empty(1 << 30, dtype=torch.uint8, device=d)
torch.cuda.synchronize()
t0 = time.time(); copies = 0
while time.time() - t0 < 1.5:
    dev.copy_(host, non_blocking=True); torch.cuda.synchronize(); copies += 1
h2d = copies * (1 << 30) / (time.time() - t0)
print(f"matmul_tflops={2 * 8192**3 * n / mm_s / 1e12:.1f} h2d_bytes_per_s={h2d:.4g} "
      f"torch_max_reserved_bytes={torch.cuda.max_memory_reserved()}")
PY
)

section "nvidia-smi"
nvidia-smi --query-gpu=name,driver_version,memory.used,power.limit,pcie.link.gen.current,pcie.link.width.current --format=csv >>"$log" 2>&1

section "watch: a torch program"
"$itera" watch --interval 50 --out "$out/watch.jsonl" -- python3 -c "$program" >"$out/program.txt" 2>>"$log"
echo "watch exit $?" | tee -a "$log"
cat "$out/program.txt" | tee -a "$log"
"$itera" report "$out/watch.jsonl" >"$out/watch.md" 2>>"$log"; echo "report exit $?" >>"$log"

section "watch: exit codes"
"$itera" watch --out "$out/exit3.jsonl" -- python3 -c 'import sys; sys.exit(3)' 2>>"$log"
echo "exit 3 -> $?" | tee -a "$log"
"$itera" watch --out "$out/segv.jsonl" -- python3 -c 'import os, signal; os.kill(os.getpid(), signal.SIGSEGV)' 2>>"$log"
echo "SIGSEGV -> $? (expect 139)" | tee -a "$log"
"$itera" watch --out "$out/missing.jsonl" -- itera-no-such-command 2>>"$log"
echo "not found -> $? (expect 127)" | tee -a "$log"
rm -f "$out"/exit3*.jsonl "$out"/segv*.jsonl "$out"/missing*.jsonl  # the bundle brings back few files

section "doctor"
"$itera" doctor --timeout 120 --out "$out/doctor.jsonl" --require torch,driver,arch,bf16,fp8,triton >"$out/doctor.md" 2>>"$log"
echo "doctor exit $? (0: every required item works)" | tee -a "$log"

section "summary"
python3 - "$out" <<'PY' | tee -a "$log"
import json, sys, os
out = sys.argv[1]
program = dict(kv.split("=") for kv in open(os.path.join(out, "program.txt")).read().split())
case = [json.loads(l) for l in open(os.path.join(out, "watch.jsonl")) if '"type":"case"' in l][0]
m = {x["name"]: x["value"] for x in case["metrics"]}
g = lambda k: m.get(k, float("nan"))
print(f"watch: {case['details']['exit']}, {g('sampler/samples'):.0f} samples, mean interval "
      f"{case['details'].get('interval_mean_ms')} ms")
print(f"  process memory peak {g('memory/process_peak')/2**30:.2f} GiB (torch max reserved "
      f"{int(program['torch_max_reserved_bytes'])/2**30:.2f} GiB; the CUDA context adds ~0.5 GiB); "
      f"device used increase {g('memory/device_used_increase_peak')/2**30:.2f} GiB")
print(f"  GPU busy mean/peak {g('gpu/busy_mean'):.0f}/{g('gpu/busy_peak'):.0f} %, SM clock mean/min "
      f"{g('clock/sm_mean'):.0f}/{g('clock/sm_min'):.0f} MHz, power mean/peak {g('power/mean'):.0f}/{g('power/peak'):.0f} W, "
      f"energy {g('energy'):.0f} J ({case['details'].get('energy_method')})")
h2d = float(program["h2d_bytes_per_s"])
print(f"  PCIe rx peak {g('pcie/rx_peak')/1e9:.2f} GB/s, tx peak {g('pcie/tx_peak')/1e9:.2f} GB/s; the program's own "
      f"pinned h2d {h2d/1e9:.2f} GB/s -> rx_peak / h2d = {g('pcie/rx_peak')/h2d:.3f} "
      f"(1.0: NVML's KB is 1024 B; 0.977: 1000 B; ~0.001: MB)")
print(f"  throttled {g('throttle/time'):.2f} s: " + ", ".join(f"{k.split('/')[-1]} {v:.2f} s" for k, v in m.items()
                                                            if k.startswith('throttle/time/')))
print(f"  program: bf16 matmul {program['matmul_tflops']} TFLOP/s")
PY
grep -E '^\| ' "$out/doctor.md" | tee -a "$log"
grep -E "^Required" "$out/doctor.md" | tee -a "$log"

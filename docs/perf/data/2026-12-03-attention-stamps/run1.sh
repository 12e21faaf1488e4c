#!/usr/bin/env bash
# Session 29, call 1 (dcf3564 + the XEXP stamp probe in decode_attention_wide_kernel, uncommitted):
# globaltimer stamps of every block of the wide decode attention's 500th, 1000th, ... launch
# (entry, q rotated and ring issued, tile 0 landed, last tile landed, end; the SM), batch 64 bf16,
# from the decode timing test (whose graph and CUPTI figures come with it).
set -uo pipefail
tar xJf bb.txz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.sm,power.limit,temperature.gpu --format=csv | tee $OUT/gpu.txt
ITERA_LLM_TIMING_BATCH=64 timeout 200 $B/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/t64.log 2>&1
echo "rc $?"
grep -c XPROBE $OUT/t64.log
grep -v XPROBE $OUT/t64.log | grep -E "CUDA graph|eager|attention|gate_up|qkv|o_proj|down|norm" | head -40
python3 - $OUT/t64.log <<'PY'
import sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if not line.startswith("XPROBE"): continue
    f = line.split()
    n, bx, by, sm, keys, t0, d1, d2, d3, d4 = f[1], *map(int, f[2:])
    rows[n].append((bx, by, sm, keys, t0, d1, d2, d3, d4))
for n, r in rows.items():
    s0 = min(x[4] for x in r); e = max(x[4] + x[8] for x in r)
    starts = sorted(x[4] - s0 for x in r); ends = sorted(x[4] + x[8] - s0 for x in r)
    loop_end = sorted(x[4] + x[7] - s0 for x in r)
    tile0 = sorted(x[4] + x[6] - s0 for x in r)
    q = lambda v: " ".join(f"{v[int(p*(len(v)-1))]/1e3:.2f}" for p in (0, .1, .5, .9, 1))
    print(f"launch {n}: blocks {len(r)} span {(e-s0)/1e3:.2f} us; keys {min(x[3] for x in r)}-{max(x[3] for x in r)}")
    print("  (us from first entry; min p10 p50 p90 max)")
    print("  entry    ", q(starts)); print("  tile0    ", q(tile0)); print("  loop end ", q(loop_end)); print("  end      ", q(ends))
    print("  own: issue+rope", q(sorted(x[5] for x in r)), "| tile0 wait", q(sorted(x[6]-x[5] for x in r)),
          "| loop", q(sorted(x[7]-x[6] for x in r)), "| merge+store", q(sorted(x[8]-x[7] for x in r)))
    per_sm = collections.defaultdict(list)
    for x in r: per_sm[x[2]].append(x)
    cnt = collections.Counter(len(v) for v in per_sm.values())
    print("  SMs used", len(per_sm), "blocks an SM:", dict(cnt))
    sm_end = sorted(max(x[4]+x[8] for x in v) - s0 for v in per_sm.values())
    print("  SM last end", q(sm_end))
PY

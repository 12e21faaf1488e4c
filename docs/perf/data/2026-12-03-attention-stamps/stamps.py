# Summary of the XEXP stamp probe's lines (run1.sh, run2.sh): per launch, the blocks' stamps from the
# first entry (us), and each SM's last block end.
import sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    if not line.startswith("XPROBE"): continue
    f = line.split()
    rows[f[1]].append(list(map(int, f[2:11])))
q = lambda v: " ".join(f"{v[int(p*(len(v)-1))]/1e3:.2f}" for p in (0, .1, .5, .9, 1))
for n, r in rows.items():
    s0 = min(x[4] for x in r)
    print(f"launch {n}: blocks {len(r)} span {(max(x[4]+x[8] for x in r)-s0)/1e3:.2f} us; keys a block {min(x[3] for x in r)}-{max(x[3] for x in r)}")
    print("  (us from first entry; min p10 p50 p90 max)")
    print("  entry    ", q(sorted(x[4]-s0 for x in r)))
    print("  tile0    ", q(sorted(x[4]+x[6]-s0 for x in r)))
    print("  loop end ", q(sorted(x[4]+x[7]-s0 for x in r)))
    print("  end      ", q(sorted(x[4]+x[8]-s0 for x in r)))
    print("  own: rope", q(sorted(x[5] for x in r)), "| loop", q(sorted(x[7]-x[6] for x in r)),
          "| epilogue", q(sorted(x[8]-x[7] for x in r)))
    per_sm = collections.defaultdict(list)
    for x in r: per_sm[x[2]].append(x)
    print("  SMs", len(per_sm), "blocks an SM:", dict(collections.Counter(len(v) for v in per_sm.values())))
    print("  SM last end", q(sorted(max(x[4]+x[8] for x in v)-s0 for v in per_sm.values())))

#!/usr/bin/env python3
"""Where a kernel's warps were sampled, from Nsight Compute's per-instruction source page.

Input: the CSV of `ncu --import REPORT.ncu-rep --page source --print-source sass --csv` (plain or
gzip), which holds, per SASS instruction, its warp-state samples, each stall reason's share of them
and how many times it executed. Without line information the code's regions are found by their
execution counts: a loop's body runs a count its neighbours do not (docs/perf/2026-12-01-ws-fp8-step.md
used this to tell the decode step's products, their per-tile ends and its barriers apart).

Prints the samples by stall reason and by opcode, then the windows of --window instructions that
hold at least --min-share of the samples (their most common execution counts, top stall reasons
and opcodes), then the --top instructions.

  python3 scripts/ncu_stalls.py docs/perf/data/2026-12-01-ws-fp8-step/run2_sass_fp8_e4m3.csv.gz
"""
import argparse
import collections
import csv
import gzip
import sys


def read_rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as e:
        sys.exit(f"{path}: cannot read it as CSV ({e})")
    # The first line names the kernel; the header follows.
    for i, row in enumerate(rows):
        if "Source" in row and "Warp Stall Sampling (All Samples)" in row:
            return row, rows[i + 1 :]
    sys.exit(f"{path}: no source-page header (want `ncu --page source --print-source sass --csv`)")


def opcode(source):
    words = source.split()
    if words and words[0].startswith("@"):  # a predicate
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu source page as CSV (.csv or .csv.gz)")
    ap.add_argument("--window", type=int, default=64, help="instructions a window (64)")
    ap.add_argument("--min-share", type=float, default=0.004, help="a window's share of the samples to be shown (0.004)")
    ap.add_argument("--top", type=int, default=20, help="instructions listed by samples (20)")
    args = ap.parse_args()
    if args.window < 1 or args.top < 0 or not 0 <= args.min_share < 1:
        sys.exit("--window must be at least 1, --top at least 0, --min-share in [0, 1)")

    header, data = read_rows(args.csv)
    col = {name: i for i, name in enumerate(header)}
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def num(row, name):
        value = row[col[name]] if col[name] < len(row) else ""
        try:
            return int(value)
        except ValueError:
            return 0

    samples = [num(r, "Warp Stall Sampling (All Samples)") for r in data]
    total = sum(samples)
    if total == 0:
        sys.exit(f"{args.csv}: no warp-state samples (was the SourceCounters section collected?)")
    by_stall, by_op = collections.Counter(), collections.Counter()
    for r, s in zip(data, samples):
        by_op[opcode(r[col["Source"]])] += s
        for h in stalls:
            by_stall[h[len("stall_"):]] += num(r, h)
    share = lambda v, of=total: f"{100.0 * v / of:.1f}%"
    print(f"{len(data)} instructions, {total} samples")
    print("by stall reason: " + ", ".join(f"{k} {share(v)}" for k, v in by_stall.most_common(10)))
    print("by opcode:       " + ", ".join(f"{k} {share(v)}" for k, v in by_op.most_common(12)))

    print(f"\nwindows of {args.window} instructions with {share(args.min_share, 1)} of the samples or more:")
    for a in range(0, len(data), args.window):
        window = data[a : a + args.window]
        s = sum(samples[a : a + args.window])
        if s == 0 or s / total < args.min_share:
            continue
        counts = collections.Counter(num(r, "Instructions Executed") for r in window).most_common(2)
        reasons = collections.Counter()
        for r in window:
            for h in stalls:
                reasons[h[len("stall_"):]] += num(r, h)
        ops = collections.Counter(opcode(r[col["Source"]]) for r in window)
        print(f"  {a:6d}-{a + len(window) - 1:<6d} {share(s):>6}  executed {counts}  "
              + ", ".join(f"{k} {share(v, s)}" for k, v in reasons.most_common(3))
              + "  | " + " ".join(k for k, _ in ops.most_common(6)))

    if args.top:
        print(f"\nthe {args.top} instructions sampled most:")
        for i in sorted(range(len(data)), key=lambda i: -samples[i])[: args.top]:
            r = data[i]
            reasons = sorted(((num(r, h), h[len("stall_"):]) for h in stalls), reverse=True)[:2]
            print(f"  {i:6d} {share(samples[i]):>6}  executed {num(r, 'Instructions Executed'):>9}  "
                  f"{r[col['Source']].strip()[:60]:<60}  " + ", ".join(f"{k} {v}" for v, k in reasons))


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# scripts/ncu_stalls.py on what it reads: a small source page written here (two loops told apart by
# their execution counts), the gzip form of it, and the inputs it must refuse with a clear message.
set -euo pipefail
script=$(realpath "$1")
work=$(mktemp -d /tmp/itera-ncu-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# The kernel line, the header (a subset of ncu's columns, in its order), then 6 instructions: a
# loop of 3 run 1000 times (most samples, waiting on shared memory), one of 2 run 10 times, a barrier.
{
  echo '"Kernel Name","void k()",'
  echo '"Address","Source","Warp Stall Sampling (All Samples)","Warp Stall Sampling (Not-issued Samples)","Instructions Executed","stall_barrier","stall_short_sb","stall_wait","stall_barrier (Not Issued)"'
  echo '"0x0","      LDS.128 R4, [R2]","50","40","1000","0","40","10","0"'
  echo '"0x10","      HMMA.16816.F32 R8, R4, R6, R8","30","20","1000","0","0","30","0"'
  echo '"0x20","  @!P0  BRA 0x0","10","5","1000","0","0","10","0"'
  echo '"0x30","      FFMA R1, R2, R3, R1","4","2","10","0","0","4","0"'
  echo '"0x40","      BRA 0x30","2","1","10","0","0","2","0"'
  echo '"0x50","      BAR.SYNC.DEFER_BLOCKING 0x1, 0x100","4","4","1","4","0","0","4"'
} >"$work/page.csv"
gzip -c "$work/page.csv" >"$work/page.csv.gz"

for f in page.csv page.csv.gz; do
  out=$(python3 "$script" "$work/$f" --window 3 --top 2)
  echo "$out"
  grep -q '^6 instructions, 100 samples$' <<<"$out" || fail "$f: the totals"
  grep -q 'by stall reason: wait 56.0%, short_sb 40.0%, barrier 4.0%' <<<"$out" || fail "$f: the stall reasons"
  grep -q 'by opcode: *LDS 50.0%, HMMA 30.0%, BRA 12.0%' <<<"$out" || fail "$f: the opcodes (a predicate skipped)"
  grep -qE '^ +0-2 +90\.0% +executed \[\(1000, 3\)\]' <<<"$out" || fail "$f: the loop's window and its count"
  grep -qE '^ +3-5 +10\.0% +executed' <<<"$out" || fail "$f: the second window"
  [ "$(grep -c 'executed  ' <<<"$out")" = 2 ] || fail "$f: --top 2"
done

# Refusals: no such file, a file that is not a source page, a page without samples, bad options.
refuse() {
  local want=$1
  shift
  if out=$(python3 "$script" "$@" 2>&1); then fail "accepted: $*"; fi
  grep -qF -- "$want" <<<"$out" || fail "$*: said '$out', want '$want'"
}
refuse "cannot read it as CSV" "$work/missing.csv"
echo "a,b" >"$work/other.csv"
refuse "no source-page header" "$work/other.csv"
head -2 "$work/page.csv" >"$work/empty.csv"
refuse "no warp-state samples" "$work/empty.csv"
refuse "--window must be at least 1" "$work/page.csv" --window 0
echo "ncu_stalls: all checks passed"

#!/usr/bin/env bash
# run 7: the batch-1 decode step's attention items with 5 and 6 keys a warp in flight (b5, b6) against
# 4 (base, 9d18a98): at the timing test's context (~561, 35 keys a split) and the bench's (512-640),
# 4 keys x 8 warps takes two passes for some warps, 5 or 6 one. Decode-step test on each; two rounds
# alternating; the trace of b5
set -uo pipefail
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --step-test --rounds 2 --trace b5 base=dt_base b5=dt_b5 b6=dt_b6

#!/usr/bin/env python3
"""List schedule of the 2048-token prefill attention's blocks (docs/perf/2026-12-01-prefill-balance.md).

A block of 64 query rows at tile index k (1..32) walks k key tiles; its cost is taken as k + 1 (the
tiles and the block's start and end). Blocks go, in launch order, to the first free slot of
`slots` (264: two blocks on each of the H200's 132 SMs). Prints the end of the schedule over the
mean load for the old order (each head's tiles heaviest first, head after head) and the new one
(every head's heaviest tile first).
"""
import heapq


def end_of(order, slots):
    free = [0.0] * slots
    for cost in order:
        heapq.heappush(free, heapq.heappop(free) + cost + 1.0)
    return max(free)


tiles, heads = 32, 32
head_after_head = [k for _ in range(heads) for k in range(tiles, 0, -1)]
heaviest_first = [k for k in range(tiles, 0, -1) for _ in range(heads)]
for slots in (132, 264, 396):
    mean = (sum(head_after_head) + len(head_after_head)) / slots
    print(f"{slots} slots: head after head {end_of(head_after_head, slots) / mean - 1:+.1%}, "
          f"heaviest first {end_of(heaviest_first, slots) / mean - 1:+.1%} past the mean load")

#!/usr/bin/env bash
# Call 2 (fp8 weights, batch 1): ITERA_X_ABL (one binary, dt_x): 8 attn and act stored as fp16 by
# the attention's merge and the gate/up, staged as they are; 16 each tile's rows' fp8 scales
# bulk-copied by the producer into shared memory with the tile (no global load at the stores);
# timing only (results wrong): 1 the scales taken as 1, 2 the o/down staging without its fp16
# conversion. c8 (no switch compiled in) as the control. Then a trace of x0.
tar xJf bb.txz
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --rounds 3 --batch 1 --weights fp8_e4m3 --step-test --trace x0 \
  c8=dt_c8 x0=dt_x,ITERA_X_ABL=0 f16=dt_x,ITERA_X_ABL=8 sc=dt_x,ITERA_X_ABL=16 both=dt_x,ITERA_X_ABL=24 \
  s1=dt_x,ITERA_X_ABL=1 raw=dt_x,ITERA_X_ABL=2 2>&1 | tee $OUT/ab.txt | tail -60

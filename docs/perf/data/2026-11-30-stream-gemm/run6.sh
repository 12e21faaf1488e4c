# run 6 (the device tool's command; the bundle held the head binary and dt_pairs, built with
# run6_fp8_step_pairs_tried.diff applied):
bash scripts/device_decode_ab.sh bb.tgz "$OUT" --rounds 3 --step-test --device-tests best head=itera_device_tests pairs=dt_pairs 2>&1 | tail -40

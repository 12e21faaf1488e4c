#!/usr/bin/env bash
# scripts/device_decode_ab.sh without a GPU: a stand-in device-test binary prints the decode timing
# test's line with a step time set by its environment (ITERA_X_FAST, the weights), fails the
# decode-step test under ITERA_X_BROKEN; the script must alternate the variants, sum their times,
# choose the fastest that passed, and refuse bad arguments.
set -euo pipefail
script=$(realpath "$1")
work=$(mktemp -d /tmp/itera-ab-test.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bb/bin" "$work/bb/lib"
cat >"$work/bb/bin/fake_tests" <<'FAKE'
#!/usr/bin/env bash
case "$*" in
  *decode_step*) if [ -n "${ITERA_X_BROKEN:-}" ]; then echo "[  FAILED  ] 1 test"; exit 1; fi
                 echo "[  PASSED  ] 1 test." ;;
  *decode_timing*)
    base=4.000; [ "${ITERA_LLM_TIMING_WEIGHTS:-}" = fp8_e4m3 ] && base=2.500
    ms=$(awk -v b="$base" -v f="${ITERA_X_FAST:-0}" -v x="${ITERA_X_BROKEN:-0}" 'BEGIN { printf "%.3f", b - 0.01 * f - 0.5 * x }')
    echo "llama-3.1-8b ${ITERA_LLM_TIMING_WEIGHTS} decode, batch ${ITERA_LLM_TIMING_BATCH}, CUDA graph: $ms ms/step, 1 tokens/s"
    if [ -n "${ITERA_LLM_DECODE_STEP_TRACE:-}" ]; then printf 'decode_step phases, us a layer\n  qkv norm 1.0\ngrid barriers\n'; fi ;;
  *-\*timing*) echo "[  PASSED  ] 62 tests." ;;
esac
FAKE
chmod +x "$work/bb/bin/fake_tests"
(cd "$work" && tar czf bb.tgz bb && rm -rf bb)
cd "$work"
out=$(bash "$script" bb.tgz "$work/out" --rounds 2 --step-test --trace fast --device-tests best \
  head=fake_tests fast=fake_tests,ITERA_X_FAST=2 broken=fake_tests,ITERA_X_BROKEN=1)
echo "$out"
fail() { echo "FAIL: $*" >&2; exit 1; }
grep -q "step test broken: rc 1" <<<"$out" || fail "the broken variant's step test"
grep -q "round 2 fp8_e4m3: head 2.500 fast 2.480 broken 2.000" <<<"$out" || fail "a round's line"
grep -q "sums: head 13.0000 fast 12.9200 broken 11.0000 (failed); best fast" <<<"$out" ||
  fail "the sums and the best (the broken variant is faster but failed its test)"
grep -q "trace fast bf16:" <<<"$out" && grep -q "qkv norm" <<<"$out" || fail "the trace"
grep -q "device tests fast: rc 0 \[  PASSED  \] 62 tests." <<<"$out" || fail "the device tests on the best"
[ -s "$work/out/all.log" ] && grep -q "=== fast ITERA_X_FAST=2" "$work/out/all.log" || fail "the log"
[ ! -e "$work/out/.t" ] || fail "the scratch file left behind"
# Bad arguments: exit 2 with a message.
if bash "$script" bb.tgz "$work/out" head=fake_tests head=fake_tests 2>"$work/err"; then fail "a variant twice"; fi
grep -q "given twice" "$work/err" || fail "the message for a variant given twice"
if bash "$script" bb.tgz "$work/out" head=missing 2>"$work/err"; then fail "a missing binary"; fi
grep -q "is not an executable of the bundle" "$work/err" || fail "the message for a missing binary"
if bash "$script" bb.tgz "$work/out" --rounds 2 2>"$work/err"; then fail "no variant"; fi
echo "device_decode_ab: ok"

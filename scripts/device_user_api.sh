#!/usr/bin/env bash
# The user API on the GPU machine (issue 5, docs/user-api.md): the device tests (CUDA events on the
# caller's stream, the stream's device checked, memory marks from the driver, the runner waiting for
# the stream), the C API test through libitera.so, and the overhead of an instrumented 1-ms step
# loop against the bare loop, host steps and device steps (device clock: CUDA events, and CUPTI). Builds nothing: it runs binaries built
# with CUDA (build-user) and carried as a bundle:
#   ../shared/tools/device-bundle bundle build-user/tests/user/itera_user_device_tests \
#       build-user/tests/user/itera_user_overhead build-user/tests/user/itera_c_api_test
#   (device) bash scripts/device_user_api.sh bundle "$OUT"
# (libitera.so.1 travels in bundle/lib: the C API test links it.) Writes user_api.log and the
# overhead tables under OUT, and prints a short table last.
set -uo pipefail
bundle=${1:?usage: device_user_api.sh BUNDLE OUT} out=${2:?usage: device_user_api.sh BUNDLE OUT}
export LD_LIBRARY_PATH=$PWD/$bundle/lib:/usr/local/cuda/lib64
bin=$PWD/$bundle/bin
log=$out/user_api.log
mkdir -p "$out"
section() { printf '\n===== %s =====\n' "$*" >>"$log"; }
for b in itera_user_device_tests itera_user_overhead itera_c_api_test; do
  [ -x "$bin/$b" ] || { echo "missing $bin/$b: bundle it first (see the top of this script)" >&2; exit 2; }
done

section nvidia-smi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv >>"$log" 2>&1

section device tests
"$bin/itera_user_device_tests" >"$out/device_tests.txt" 2>&1
device_rc=$?
cat "$out/device_tests.txt" >>"$log"
passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out/device_tests.txt")
skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$out/device_tests.txt")
failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$out/device_tests.txt")

section C API test
"$bin/itera_c_api_test" "$out/c_api" >>"$log" 2>&1
capi_rc=$?

overhead() {  # mode clock scopes
  section "overhead, $1 steps, $2 clock, $3 scopes"
  local f="$out/overhead_$1_$2_$3.md"
  "$bin/itera_user_overhead" --mode "$1" --clock "$2" --scopes "$3" --steps 2000 --rounds 7 >"$f" 2>>"$log"
  local rc=$?
  cat "$f" >>"$log"
  local row
  row=$(grep -E "^\| $1 \|" "$f" | awk -F'|' '{gsub(/ /,"",$5); gsub(/ /,"",$6); gsub(/ /,"",$7); gsub(/ /,"",$9); print $5" -> "$6" ms/step, "$7" ("$9")"}')
  local cost
  cost=$(sed -n 's/^instrumentation cost per step, from 20000 empty steps x 5 rounds: \([0-9.-]* us\).*limit .*: \([A-Z]*\)).*/\1 per step (\2)/p' "$f")
  echo "${row:-no result (exit $rc)}; cost ${cost:-?}"
}
host_row=$(overhead host events 4)
events_row=$(overhead device events 4)
cupti_row=$(overhead device cupti 4)
events2_row=$(overhead device events 2)
events1_row=$(overhead device events 1)

{
  printf '\n| check | result |\n| --- | --- |\n'
  printf '| device tests | %s passed, %s skipped, %s failed (exit %s) |\n' "${passed:-0}" "${skipped:-0}" "${failed:-0}" "$device_rc"
  printf '| C API test (libitera.so) | %s |\n' "$([ "$capi_rc" -eq 0 ] && echo passed || echo "FAILED (exit $capi_rc)")"
  printf '| overhead, 1-ms host steps, 4 scopes | %s |\n' "$host_row"
  printf '| overhead, 1-ms device steps, 4 device-timed scopes, CUDA events | %s |\n' "$events_row"
  printf '| overhead, 1-ms device steps, 4 device-timed scopes, CUPTI records | %s |\n' "$cupti_row"
  printf '| overhead, 1-ms device steps, 2 device-timed scopes, CUDA events | %s |\n' "$events2_row"
  printf '| overhead, 1-ms device steps, 1 device-timed scope, CUDA events | %s |\n' "$events1_row"
} | tee -a "$log"
grep -E '^\[  (FAILED|SKIPPED) \] [A-Za-z0-9_]+\.[A-Za-z0-9_]+$' "$out/device_tests.txt" | head -12

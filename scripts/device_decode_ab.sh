#!/usr/bin/env bash
# A/B of the llm decode step on the GPU machine. The variants alternate within each round, so that
# a machine's drift falls on all of them alike: two fresh H200 machines ran the same binary's step
# up to 17% apart (docs/perf/2026-11-30-decode-step-4.md), so only comparisons within one call
# hold. A variant is NAME=BINARY[,VAR=VALUE...]: a device-test binary of the bundle (bin/) and the
# environment it runs under (an experiment's temporary switch, say).
#
#   (here)   ../shared/tools/device-bundle bb build/tests/itera_device_tests /tmp/v/dt_new
#            tar czf bb.tgz bb            (carry bb.tgz)
#   (device) bash scripts/device_decode_ab.sh bb.tgz "$OUT" [options] head=itera_device_tests \
#              new=dt_new switch=itera_device_tests,ITERA_X_FOO=1
#
# Options: --rounds N (3), --weights LIST (bf16,fp8_e4m3), --batch N (1), --step-test (the
# decode-step test on every variant first; a variant that fails it is timed but not chosen),
# --trace NAME (that variant's in-kernel trace, ITERA_LLM_DECODE_STEP_TRACE, fp8 and bf16),
# --device-tests NAME (every device test but the timings, on that variant; "best": the variant
# with the smallest sum). Prints a line per round and weight type (the CUDA graph's ms a step per
# variant), then each variant's sum and the best; every test's output goes to OUT/all.log (the
# device tool brings back at most 8 files).
set -uo pipefail
if [ $# -lt 3 ]; then
  sed -n '2,21p' "$0" >&2
  exit 2
fi
bundle_tgz=$1 out=$2
shift 2
rounds=3 weights=bf16,fp8_e4m3 batch=1 step_test=0 trace="" device_tests=""
names=()
declare -A bin_of env_of sum_of fails
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --weights) weights=$2; shift 2 ;;
    --batch) batch=$2; shift 2 ;;
    --step-test) step_test=1; shift ;;
    --trace) trace=$2; shift 2 ;;
    --device-tests) device_tests=$2; shift 2 ;;
    *=*)
      name=${1%%=*} rest=${1#*=}
      [ -n "${bin_of[$name]:-}" ] && { echo "variant $name given twice" >&2; exit 2; }
      names+=("$name")
      bin_of[$name]=${rest%%,*}
      env_of[$name]=""
      [[ $rest == *,* ]] && env_of[$name]=${rest#*,} && env_of[$name]=${env_of[$name]//,/ }
      sum_of[$name]=0
      shift ;;
    *) echo "unknown argument '$1' (a variant is NAME=BINARY[,VAR=VALUE...])" >&2; exit 2 ;;
  esac
done
[ ${#names[@]} -ge 1 ] || { echo "no variant given (NAME=BINARY[,VAR=VALUE...])" >&2; exit 2; }
mkdir -p "$out"
[ -f "$bundle_tgz" ] && tar xzf "$bundle_tgz"
bundle=$(basename "$bundle_tgz" .tgz)
export LD_LIBRARY_PATH=$PWD/$bundle/lib:/usr/local/cuda/lib64
B=$PWD/$bundle/bin
log=$out/all.log
for n in "${names[@]}"; do
  [ -x "$B/${bin_of[$n]}" ] || { echo "variant $n: $B/${bin_of[$n]} is not an executable of the bundle" >&2; exit 2; }
done
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,power.limit \
  --format=csv,noheader | tee -a "$log"

# run NAME ENV... -- ARGS...: the variant's binary under its environment (and ENV), output appended to the log.
run() {
  local n=$1
  shift
  local extra=()
  while [ "$1" != "--" ]; do extra+=("$1"); shift; done
  shift
  echo "=== $n ${env_of[$n]} ${extra[*]} $*" >>"$log"
  env ${env_of[$n]} "${extra[@]}" timeout 300 "$B/${bin_of[$n]}" "$@" >"$out/.t" 2>&1
  local rc=$?
  cat "$out/.t" >>"$log"
  return $rc
}

if [ $step_test = 1 ]; then
  for n in "${names[@]}"; do
    run "$n" -- --gtest_filter='*decode_step*'
    rc=$?
    [ $rc -eq 0 ] || fails[$n]=1
    echo "step test $n: rc $rc $(grep -E '^\[  (PASSED|FAILED)' "$out/.t" | tr '\n' ' ')"
  done
fi

for r in $(seq 1 "$rounds"); do
  for w in ${weights//,/ }; do
    line="round $r $w:"
    for n in "${names[@]}"; do
      run "$n" ITERA_LLM_TIMING_WEIGHTS="$w" ITERA_LLM_TIMING_BATCH="$batch" -- --gtest_filter='*decode_timing_llama*'
      ms=$(grep -E 'CUDA graph' "$out/.t" | tail -1 | sed -n 's/.*CUDA graph: \([0-9.]*\) ms.*/\1/p')
      if [ -z "$ms" ]; then
        fails[$n]=1
        ms=-
      else
        sum_of[$n]=$(awk -v a="${sum_of[$n]}" -v b="$ms" 'BEGIN { printf "%.4f", a + b }')
      fi
      line="$line $n $ms"
    done
    echo "$line"
  done
done

best=""
line="sums:"
for n in "${names[@]}"; do
  line="$line $n ${sum_of[$n]}${fails[$n]:+ (failed)}"
  [ -n "${fails[$n]:-}" ] && continue
  if [ -z "$best" ] || awk -v a="${sum_of[$n]}" -v b="${sum_of[$best]}" 'BEGIN { exit !(a < b) }'; then best=$n; fi
done
echo "$line; best ${best:-none}"

if [ -n "$trace" ]; then
  [ -n "${bin_of[$trace]:-}" ] || { echo "--trace $trace: no such variant" >&2; exit 2; }
  for w in ${weights//,/ }; do
    run "$trace" ITERA_LLM_DECODE_STEP_TRACE=1 ITERA_LLM_TIMING_WEIGHTS="$w" ITERA_LLM_TIMING_BATCH="$batch" -- \
      --gtest_filter='*decode_timing_llama*'
    echo "trace $trace $w:"
    sed -n '/decode_step phases/,/^grid barriers/p' "$out/.t" | head -16
  done
fi

if [ -n "$device_tests" ]; then
  [ "$device_tests" = best ] && device_tests=$best
  if [ -z "$device_tests" ] || [ -z "${bin_of[$device_tests]:-}" ]; then
    echo "--device-tests: no variant to run them on" >&2
  else
    run "$device_tests" -- --gtest_filter='-*timing*'
    echo "device tests $device_tests: rc $? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/.t" | tr '\n' ' ')"
    grep -E '^\[  FAILED|Failure' "$out/.t" | head -10
  fi
fi
rm -f "$out/.t"
[ -n "$best" ]

#!/usr/bin/env bash
# `itera data images | decode | preprocess` end to end: the set on disk, determinism, refusals with
# their exit codes and messages, a user's folder with bad files (errors by index, names never shown).
set -uo pipefail
itera=$1
work=$(mktemp -d /tmp/itera-mm-cli.XXXXXX)
trap 'rm -rf "$work"' EXIT
failures=0 checks=0
check() {  # check NAME COMMAND...: the command must succeed
  checks=$((checks + 1))
  if ! "${@:2}"; then echo "FAIL: $1" >&2; failures=$((failures + 1)); fi
}
# expect_fail NAME CODE PATTERN ARGS...: itera ARGS must exit CODE with PATTERN on stderr
expect_fail() {
  local name=$1 code=$2 pattern=$3; shift 3
  local err rc
  err=$("$itera" "$@" 2>&1 >/dev/null); rc=$?
  checks=$((checks + 1))
  if [ "$rc" -ne "$code" ] || ! grep -q -- "$pattern" <<<"$err"; then
    echo "FAIL: $name: exit $rc (want $code), stderr: $err" >&2; failures=$((failures + 1))
  fi
}

# a set, twice with the same seed: identical bytes
gen=(data images --sizes 64,96x48 --count 1 --requests 5 --max-images-per-request 2 --prompt-tokens 20 --output-tokens 8 --seed 3 --threads 2)
check "generate" "$itera" "${gen[@]}" --out "$work/a"
check "generate again" "$itera" "${gen[@]}" --out "$work/b"
check "same seed, same bytes" diff -r "$work/a" "$work/b"
check "manifest" test -s "$work/a/manifest.json"
check "4 images" test "$(ls "$work/a/images" | wc -l)" -eq 4
check "5 requests" test "$(wc -l <"$work/a/requests.jsonl")" -eq 5
check "requests have the fixed output" grep -q '"output_tokens":8' "$work/a/requests.jsonl"
"$itera" data images --sizes 64 --count 1 --seed 4 --out "$work/c" >/dev/null
check "another seed, other bytes" bash -c "! cmp -s '$work/a/images/000000_64x64.jpg' '$work/c/images/000000_64x64.jpg'"

# refusals: exit 2 (usage) with a message that names the problem
expect_fail "non-empty --out" 2 "is not empty" "${gen[@]}" --out "$work/a"
expect_fail "missing --out" 2 "out" data images --sizes 64
expect_fail "bad size" 2 "'0' has a side outside" data images --out "$work/x1" --sizes 0
expect_fail "malformed size" 2 "'64y64' is not a size" data images --out "$work/x2" --sizes 64y64
expect_fail "duplicate size" 2 "is given twice" data images --out "$work/x3" --sizes 64,64
expect_fail "bad format" 2 "'gif' is not jpeg or png" data images --out "$work/x4" --formats gif
expect_fail "bad quality" 2 "jpeg-quality must be 1..100" data images --out "$work/x5" --jpeg-quality 101
expect_fail "zero count" 2 "count must be" data images --out "$work/x6" --count 0
expect_fail "no subcommand" 2 "" data
expect_fail "zero threads" 2 "'0' is not a thread count" data decode "$work/a" --threads 0
expect_fail "bad mode" 2 "resize mode 'squash' is unknown" data preprocess "$work/a" --mode squash
expect_fail "patch over the image" 2 "at most the image size" data preprocess "$work/a" --size 224 --patch 300
expect_fail "not a folder" 5 "is not a folder" data decode "$work/nope"
check "refusals wrote nothing" test ! -e "$work/x1" -a ! -e "$work/x4"

# decode a generated set: counts and one row per thread count
out=$("$itera" data decode "$work/a" --threads 1,2 --passes 2)
check "decode exit 0" test $? -eq 0
check "decode counts" grep -q "images: 4 (4 good, 0 bad)" <<<"$out"
check "decode row 1" grep -q "^| 1 |" <<<"$out"
check "decode row 2" grep -q "^| 2 |" <<<"$out"

# a user's own folder with bad files among good ones
own=$work/own
mkdir -p "$own/sub"
cp "$work/a/images/000000_64x64.jpg" "$own/a_holiday.jpg"
: >"$own/b_zero.jpg"
head -c 300 "$work/a/images/000001_64x64.png" >"$own/c_cut.png"
printf 'GIF89a\x01\x00\x01\x00\x80\x00\x00' >"$own/d_anim.gif"
cp "$work/a/images/000003_96x48.png" "$own/sub/e_scan.png"
echo "not an image" >"$own/notes.txt"
out=$("$itera" data decode "$own" --threads 1,2 --passes 1)
check "own folder exit 0" test $? -eq 0
check "own folder counts" grep -q "images: 5 (2 good, 3 bad), 1 other files left out" <<<"$out"
check "zero-byte by index" grep -q "image 1 (decode): empty file" <<<"$out"
check "truncated by index" grep -q "image 2 (decode): PNG data is damaged" <<<"$out"
check "gif by index" grep -q "image 3 (decode): unsupported format: gif" <<<"$out"
check "no file names (R18)" bash -c "! grep -Eq 'holiday|b_zero|c_cut|d_anim|e_scan' <<<'$out'"
json=$("$itera" data decode "$own" --threads 1 --passes 1 --format json)
check "json counts" python3 -c "import json,sys; d=json.loads(sys.argv[1]); assert (d['good'], d['bad'], [e['index'] for e in d['errors']]) == (2, 3, [1, 2, 3]), d" "$json"

# preprocess: the views per image and .npy files
out=$("$itera" data preprocess "$work/a" --mode tiles --size 28 --patch 14 --out "$work/npy" --threads 2)
check "preprocess exit 0" test $? -eq 0
check "preprocess npy files" test "$(ls "$work/npy" | wc -l)" -eq 4
check "preprocess npy header" bash -c "head -c 80 '$work/npy/000000.npy' | grep -q \"'shape': (10,3,28,28)\""
expect_fail "preprocess non-empty --out" 2 "is not empty" data preprocess "$work/a" --out "$work/npy"

echo "$((checks - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]

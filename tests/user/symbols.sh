#!/usr/bin/env bash
# libitera.so exports the C API (itera_*) and nothing else: the C++ internals and the static
# libraries linked into it stay hidden, so the ABI is include/itera/itera.h alone.
# Usage: symbols.sh LIBITERA_SO
set -uo pipefail
lib=$1
exported=$(nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sort)
[ -n "$exported" ] || { echo "FAIL: $lib exports nothing" >&2; exit 1; }
others=$(grep -v '^itera_' <<<"$exported" | grep -v -E '^(_init|_fini|_edata|_end|__bss_start)$')
if [ -n "$others" ]; then
  echo "FAIL: $lib exports symbols outside the C API:" >&2
  head -20 <<<"$others" >&2
  exit 1
fi
# Every function itera.h declares is exported.
header=$(dirname "$0")/../../include/itera/itera.h
missing=0
for f in $(grep -oE 'ITERA_API [^(]*\b(itera_[a-z_]+)\(' "$header" | grep -oE 'itera_[a-z_]+\($' | tr -d '('); do
  grep -qx "$f" <<<"$exported" || { echo "FAIL: $f is declared in itera.h but not exported" >&2; missing=1; }
done
[ "$missing" -eq 0 ] || exit 1
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libitera.so.1" ] || { echo "FAIL: soname is '$soname', expected libitera.so.1" >&2; exit 1; }
echo "libitera.so exports $(wc -l <<<"$exported") itera_* symbols and nothing else (soname $soname)"

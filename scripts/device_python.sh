#!/usr/bin/env bash
# The Python package on the GPU host (issue 5, docs/python.md): builds and installs the module there
# (pip, offline), imports it, runs the pytest suite with PyTorch present, the overhead benchmark (a
# stage scope's cost in us; the 1-ms step loop bare against instrumented, host and GPU steps) and
# both examples (image-text pipeline in both loops, PEFT LoRA fine-tune with and without gradient
# checkpointing), and writes results files, their `itera report` renderings and a short table.
#
# Two steps, because the GPU host cannot configure the whole project: it has nvcc, CMake, ninja,
# Python 3.12, pybind11 and PyTorch, but none of the Debian -dev libraries (fmt, nlohmann-json,
# CLI11, OpenBLAS, libjpeg-turbo, libpng, the desk's), no pkg-config modules and no npm registry
# (Chart.js is embedded at build time). So the itera libraries are built here, with CUDA, and the
# host compiles and links only the module, against its own Python and pybind11:
#
#   1. here, the Debian build machine, from the repository root (about 20 min on 2 busy cores, once
#      per commit; ITERA_PY_JOBS sets the jobs):
#        bash scripts/device_python.sh prepare
#      Configures build-py-cuda (CUDA, ITERA_CUDA_ARCHS=90a, tests off), builds itera_python (the
#      module for this machine's /usr/bin/python3: it builds and links with CUDA) and the itera CLI,
#      checks the standalone build of python/ against what it packs, and packs
#      build-py-cuda/prebuilt.tar.xz (about 20 MB): the static libraries itera_user, itera_lib,
#      itera_cuda, itera_core, the headers they need beyond include/, itera_prebuilt.cmake (the link
#      line), the itera CLI and the shared libraries the host lacks.
#   2. there, from the repository root with $OUT set (device.run, carry ["build-py-cuda/prebuilt.tar.xz"]):
#        bash scripts/device_python.sh run build-py-cuda/prebuilt.tar.xz
#      About 3-4 minutes expected (build and install 20-40 s with 16 jobs, pytest under a minute, the
#      benchmark about 40 s, each example under a minute); every step has its own limit, cut so that
#      the whole stops within 6 minutes (give device.run timeout_s 600). Writes under OUT (8 files at
#      most, what the device tool brings back):
#        summary.md          the short table (printed last too)
#        python.log          every step's output, the build's included
#        pytest.txt          the pytest run
#        overhead.md         the benchmark's tables, GPU steps then host steps
#        pipeline.jsonl, lora.jsonl                 the examples' results files
#        report_pipeline.md, report_lora.md         `itera report` of each
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mode=${1:-}

prepare() {
  local dir=${ITERA_PY_CUDA_BUILD:-$root/build-py-cuda} jobs=${ITERA_PY_JOBS:-$(nproc)}
  local python=${ITERA_PY_PYTHON:-/usr/bin/python3}
  cmake -G Ninja -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DITERA_ENABLE_CUDA=ON -DITERA_CUDA_ARCHS=90a \
    -DITERA_BUILD_PYTHON=ON -DITERA_BUILD_TESTS=OFF -DITERA_BUILD_BENCHMARKS=OFF -DPython3_EXECUTABLE="$python" ||
    return 1
  grep -q 'libitera_cuda\.a' "$dir/build.ninja" ||
    { echo "prepare: $dir was configured without CUDA: install the CUDA toolkit (nvcc) here" >&2; return 1; }
  ninja -C "$dir" -j "$jobs" itera_python itera || return 1
  local out=$dir/prebuilt
  rm -rf "$out" "$dir/prebuilt.tar.xz"
  mkdir -p "$out/lib" "$out/bin" "$out/include"
  local link
  link=$(ninja -C "$dir" -t commands itera_python | tail -n 1)
  local deps
  deps=$(ninja -C "$dir" -t deps python/CMakeFiles/itera_python.dir/src/module.cpp.o \
                                 python/CMakeFiles/itera_python.dir/src/runner.cpp.o)
  "$python" - "$dir" "$out" "$root" "$link" "$deps" <<'PY' || return 1
import os, re, shlex, shutil, subprocess, sys, time
build, out, root, link, deps = sys.argv[1:6]
lib = os.path.join(out, "lib")
statics, shared, flags = [], [], []
cuda_names = {"libcudart": "CUDA::cudart", "libcublasLt": "CUDA::cublasLt", "libcublas": "CUDA::cublas",
              "libcupti": "CUDA::cupti", "libnvrtc": "CUDA::nvrtc", "libcuda": "CUDA::cuda_driver"}

def soname(path):
    text = subprocess.run(["objdump", "-p", path], capture_output=True, text=True).stdout
    m = re.search(r"SONAME\s+(\S+)", text)
    return m.group(1) if m else os.path.basename(path)

tokens = shlex.split(link)
for t in tokens[tokens.index("-o") + 2:]:
    if t.endswith(".o"):
        continue
    if t.endswith(".a"):
        src = t if os.path.isabs(t) else os.path.join(build, t)
        shutil.copy2(src, lib)
        statics.append(os.path.basename(src))
    elif re.search(r"\.so(\.[0-9]+)*$", t):
        real = os.path.realpath(t)
        base = os.path.basename(t).split(".so")[0]
        if "/cuda" in real:
            shared.append(cuda_names.get(base, "CUDA::" + base[3:]))
        else:
            name = soname(real)
            shutil.copy2(real, os.path.join(lib, name))
            shared.append("${_itera_prebuilt}/lib/" + name)
    elif t.startswith("-l") or t == "-pthread":
        shared.append(t)
    # rpath and other linker options: python/CMakeLists.txt sets its own
# Headers from outside the repository that the module's sources include (nlohmann-json).
system = {"c++", "x86_64-linux-gnu", "linux", "asm-generic", "pybind11", "sys", "bits", "gnu"}
copied = set()
for line in deps.splitlines():
    h = line.strip()
    m = re.match(r"/usr/(?:local/)?include/([^/]+)/", h)
    if not m or m.group(1) in system or m.group(1).startswith("python3"):
        continue
    top = m.group(1)
    if top not in copied:
        shutil.copytree(os.path.join(h[:m.end(1)]), os.path.join(out, "include", top), dirs_exist_ok=True)
        copied.add(top)
commit = subprocess.run(["git", "-C", root, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True).stdout.strip()
dirty = subprocess.run(["git", "-C", root, "status", "--porcelain"], capture_output=True, text=True).stdout.strip()
group = " ".join("${_itera_prebuilt}/lib/" + s for s in statics)
with open(os.path.join(out, "itera_prebuilt.cmake"), "w") as f:
    f.write(f"""# Generated by scripts/device_python.sh prepare, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, from
# {build} (commit {commit}{' with uncommitted changes' if dirty else ''}): the itera libraries the Python
# module links, built with CUDA (ITERA_CUDA_ARCHS=90a). Included by python/CMakeLists.txt, standalone;
# ITERA_SOURCE_ROOT is the checkout (its include/ must be the one these libraries were built from).
set(_itera_prebuilt "${{CMAKE_CURRENT_LIST_DIR}}")
find_package(CUDAToolkit REQUIRED)
add_library(itera_prebuilt INTERFACE IMPORTED)
target_include_directories(itera_prebuilt INTERFACE "${{ITERA_SOURCE_ROOT}}/include" "${{ITERA_SOURCE_ROOT}}"
                           "${{_itera_prebuilt}}/include")
target_compile_definitions(itera_prebuilt INTERFACE ITERA_WITH_CUDA=1)
target_link_libraries(itera_prebuilt INTERFACE -Wl,--start-group {group} -Wl,--end-group
                      {' '.join(shared)})
# The CUDA runtime's implicit libraries (-lcudadevrt -lcudart_static) come from the host's toolkit.
target_link_directories(itera_prebuilt INTERFACE "${{CUDAToolkit_LIBRARY_DIR}}")
# DT_RPATH (not RUNPATH) also serves the carried libraries' own dependencies (OpenBLAS's libgfortran).
target_link_options(itera_prebuilt INTERFACE -Wl,--disable-new-dtags "-Wl,-rpath,${{_itera_prebuilt}}/lib")
set(ITERA_PREBUILT_COMMIT "{commit}")
""")
print(f"prepare: {len(statics)} static libraries, {len(shared)} other link items, headers from {sorted(copied)}")
PY
  # The CLI, and the shared libraries of everything carried that a GPU host may lack (glibc, libstdc++,
  # the driver and the CUDA toolkit's own libraries stay: the host has them).
  cp -L "$dir/itera" "$out/bin/"
  local skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libstdc\+\+|libgcc_s|libcuda\.so|libnvidia-|libcublas|libcudart|libnccl|libnvjpeg|libcupti|libnvrtc|libcufft|libcurand|libcusparse|libcusolver|libnpp|libnvJitLink|libnvtx|libpython)'
  local f name path
  for f in "$out/bin/itera" "$(cat "$dir/python/itera_module.txt")" "$out"/lib/*.so*; do
    ldd "$f" | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
      [[ $name =~ $skip ]] && continue
      cp -Ln "$path" "$out/lib/" 2>/dev/null || true
    done
  done
  # The standalone build of python/ against exactly what is packed, with this machine's Python: the
  # path the GPU host takes, checked here.
  local check=$dir/standalone-check
  rm -rf "$check"
  cmake -G Ninja -S "$root/python" -B "$check" -DITERA_PREBUILT_DIR="$out" -DPython3_EXECUTABLE="$python" >/dev/null &&
    ninja -C "$check" -j "$jobs" >/dev/null || { echo "prepare: the standalone build against $out failed" >&2; return 1; }
  PYTHONPATH=$check "$python" -c "
import itera
with itera.Session('prepare-check', device='auto') as s:
    with s.stage('x'):
        pass
assert itera.built_with_cuda, 'the packed libraries have no CUDA'
print('prepare: standalone module imports; built with CUDA; this machine records', s.backend, '(' + (s.host_only_reason or 'GPU') + ')')
" || return 1
  XZ_OPT=${XZ_OPT:--6 -T0} tar -C "$dir" -cJf "$dir/prebuilt.tar.xz" prebuilt || return 1
  du -h "$dir/prebuilt.tar.xz" | awk '{print "prepare: packed", $2, "(" $1 ")"}'
  echo "prepare: now, on the GPU host: bash scripts/device_python.sh run ${dir#"$root"/}/prebuilt.tar.xz" \
       "(device.run carry [\"${dir#"$root"/}/prebuilt.tar.xz\"])"
}

run() {
  local archive=${1:?usage: device_python.sh run PREBUILT.tar.xz}
  local out=${OUT:?set OUT: the folder whose files come back}
  mkdir -p "$out"
  # Keep NVLink multicast off (the host's rules), also for the programs started below.
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
  local work=/tmp/itera-python
  rm -rf "$work" && mkdir -p "$work"
  local log=$out/python.log summary=$out/summary.md
  : >"$log"
  section() { printf '\n===== %s =====\n' "$*" >>"$log"; }
  local t0
  declare -A result
  begin() { t0=$(date +%s%N); section "$1"; }
  took() { echo "$(( ($(date +%s%N) - t0) / 1000000000 )) s"; }
  # Each step's own limit, cut to what is left of 340 s for the whole run (device.run: timeout_s 600).
  local deadline=$(( $(date +%s) + 340 ))
  limit() { local left=$(( deadline - $(date +%s) )); [ "$left" -lt 5 ] && left=5; echo $(( $1 < left ? $1 : left )); }

  begin "unpack $archive"
  tar -C "$work" -xJf "$archive" >>"$log" 2>&1 || { echo "cannot unpack $archive" | tee -a "$log"; return 1; }
  local prebuilt=$work/prebuilt itera=$work/prebuilt/bin/itera site=$work/site
  export LD_LIBRARY_PATH=$prebuilt/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  head -4 "$prebuilt/itera_prebuilt.cmake" >>"$log"

  section environment
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,power.limit --format=csv >>"$log" 2>&1
  python3 - >>"$log" 2>&1 <<'PY'
import importlib, sys
print("python", sys.version.split()[0], sys.executable)
for name in ("torch", "transformers", "peft", "timm", "torchvision", "pybind11", "pytest", "numpy", "PIL"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as e:
        print(name, "missing:", e)
PY
  cmake --version | head -1 >>"$log"; nvcc --version | tail -1 >>"$log" 2>&1

  begin "build and install: pip install --no-build-isolation ./python (ITERA_PREBUILT_DIR)"
  (cd "$root" && ITERA_PREBUILT_DIR=$prebuilt CMAKE_BUILD_PARALLEL_LEVEL=16 timeout "$(limit 150)" \
     python3 -m pip install -v --no-build-isolation --no-deps --no-index --no-cache-dir --target "$site" ./python) >>"$log" 2>&1
  local build_rc=$?
  result[build]="$([ $build_rc -eq 0 ] && echo ok || echo "FAILED (exit $build_rc)"), $(took)"
  export PYTHONPATH=$site ITERA_CLI=$itera

  begin "import"
  local import_text
  import_text=$(cd "$work" && timeout "$(limit 60)" python3 -c "
import itera, torch
with itera.Session('probe') as s:
    print(f'itera {itera.__version__} from {itera.__file__}; built with CUDA: {itera.built_with_cuda}; '
          f'session backend {s.backend}, device {s.device} {s.host_only_reason}; torch memory {s.torch_memory}')
" 2>&1)
  echo "$import_text" >>"$log"
  result[import]=$(echo "$import_text" | tail -1 | cut -c1-160)

  begin "pytest (torch present)"
  (cd "$work" && timeout "$(limit 120)" python3 -m pytest -p no:cacheprovider -q -rs "$root/python/tests") >"$out/pytest.txt" 2>&1
  local pytest_rc=$?
  cat "$out/pytest.txt" >>"$log"
  result[pytest]="$(grep -E '(passed|failed|error)' "$out/pytest.txt" | tail -1 | tr -d '=' | sed 's/^ *//') (exit $pytest_rc), $(took)"

  begin "overhead benchmark"
  (cd "$work" && timeout "$(limit 90)" python3 "$root/python/bench/overhead.py" --mode torch --steps 500 --rounds 7 \
     --device-clock cupti --out "$work/overhead_torch.md") >>"$log" 2>&1
  local oh_torch=$?
  (cd "$work" && timeout "$(limit 90)" python3 "$root/python/bench/overhead.py" --mode torch --steps 500 --rounds 7 \
     --device-clock events --out "$work/overhead_torch_events.md") >>"$log" 2>&1
  local oh_events=$?
  (cd "$work" && timeout "$(limit 40)" python3 "$root/python/bench/overhead.py" --mode host --steps 500 --rounds 5 \
     --out "$work/overhead_host.md") >>"$log" 2>&1
  local oh_host=$?
  cat "$work"/overhead_torch.md "$work"/overhead_torch_events.md "$work"/overhead_host.md >"$out/overhead.md" 2>/dev/null
  row() {  # the step-loop rows of an overhead table, compacted
    python3 - "$work/overhead_$1.md" <<'PY' 2>/dev/null
import sys
rows = [[c.strip() for c in l.strip().strip("|").split("|")] for l in open(sys.argv[1]) if l.startswith("| ")]
rows = [r for r in rows if len(r) == 11 and r[0] not in ("mode", "---")]
print("; ".join(f"{r[0]}, {r[3]}: {r[4]} -> {r[5]} ms/step, {r[6]} ({r[10]})" for r in rows)
      + (f"; scope {rows[0][8]}" if rows else ""))
PY
  }
  result[overhead_torch]="CUPTI: $(row torch) (exit $oh_torch)"
  result[overhead_torch_events]="CUDA events: $(row torch_events) (exit $oh_events)"
  result[overhead_host]="$(row host) (exit $oh_host)"

  if [ -n "${ITERA_PY_SKIP_EXAMPLES:-}" ]; then
    result[pipeline]="skipped (ITERA_PY_SKIP_EXAMPLES)"
    result[lora]="skipped (ITERA_PY_SKIP_EXAMPLES)"
  else
  begin "test images: itera data images"
  "$itera" data images --out "$work/images" --sizes 224,448,768,1280x720 --count 2 --requests 16 >>"$log" 2>&1

  begin "example: image-text pipeline"
  (cd "$work" && timeout "$(limit 120)" python3 "$root/python/examples/image_text_pipeline.py" --images "$work/images" \
     --out "$out/pipeline.jsonl") >>"$log" 2>&1
  local pipe_rc=$?
  "$itera" report "$out/pipeline.jsonl" >"$out/report_pipeline.md" 2>>"$log"
  local report_rc=$?
  result[pipeline]="$(cases "$out/pipeline.jsonl") (exit $pipe_rc; itera report exit $report_rc), $(took)"

  begin "example: LoRA fine-tune"
  (cd "$work" && timeout "$(limit 120)" python3 "$root/python/examples/lora_finetune.py" --out "$out/lora.jsonl") \
    >"$work/lora.txt" 2>&1
  local lora_rc=$?
  cat "$work/lora.txt" >>"$log"
  "$itera" report "$out/lora.jsonl" >"$out/report_lora.md" 2>>"$log"
  report_rc=$?
  result[lora]="$(cases "$out/lora.jsonl") (exit $lora_rc; itera report exit $report_rc), $(took)"
  fi

  {
    printf '| step | result |\n| --- | --- |\n'
    for k in build import pytest overhead_torch overhead_torch_events overhead_host pipeline lora; do
      printf '| %s | %s |\n' "$k" "${result[$k]:-not run}"
    done
    printf '\nLoRA, per case (from the example):\n\n'
    grep -E '^(\||LoRA)' "$work/lora.txt"
  } | tee "$summary" | tee -a "$log"
  grep -E '^(FAILED|ERROR|SKIPPED)' "$out/pytest.txt" | head -12
}

cases() {  # "N cases: k ok, m failed" of a results file
  python3 - "$1" <<'PY' 2>/dev/null || echo "no results"
import json, sys
c = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
c = [x for x in c if x.get("type") == "case"]
ok = sum(x["status"] == "ok" for x in c)
print(f"{len(c)} cases: {ok} ok, {len(c) - ok} failed")
PY
}

case $mode in
  prepare) prepare ;;
  run) shift; run "$@" ;;
  *) echo "usage: device_python.sh prepare | run PREBUILT.tar.xz   (the top of this script says where each runs)" >&2; exit 2 ;;
esac

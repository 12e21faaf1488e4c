# Shared by scripts/run.sh and scripts/test.sh: install what is missing (Debian packages), then
# configure and build. Source it; it sets ITERA_BUILD_DIR.
set -euo pipefail

ITERA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ITERA_BUILD_DIR=${ITERA_BUILD_DIR:-$ITERA_ROOT/build}

itera_packages=(g++ cmake ninja-build pkg-config git python3
                libcli11-dev nlohmann-json3-dev libfmt-dev libopenblas-dev
                libgtest-dev libgmock-dev libbenchmark-dev)
# desk (issue 7): the rental desk's libraries, PostgreSQL for its tests (they start their own server),
# Debian's chromium for its browser test (npm comes with the machine's Node.js), wrk for its benchmark.
itera_packages+=(libcpp-httplib-dev libsqlite3-dev libpq-dev libsodium-dev postgresql curl nodejs chromium wrk)
itera_packages+=(libturbojpeg0-dev libpng-dev python3-pil python3-numpy)  # multimodal (issue 4): JPEG/PNG codecs; PIL checks the preprocess reference
itera_packages+=(python3-dev pybind11-dev python3-pybind11 python3-pytest python3-numpy python3-setuptools python3-wheel python3-pip python3-venv)  # python package (issue 5): the module's headers and pybind11, its pytest suite, pip install ./python
# npm: Debian's package where the machine's Node.js came without one (NodeSource's bundles its own,
# and Debian's would conflict with it).
command -v npm >/dev/null 2>&1 || itera_packages+=(npm)

itera_install_missing() {
  local missing=()
  for p in "${itera_packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "itera: installing ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
}

itera_build() {
  # A CUDA toolkit, when present, adds the cuda backend; ITERA_CUDA_ARCHS narrows the architectures.
  # Always passed: the value is cached, and a quick narrow build must not stick to later ones.
  local args=(-G Ninja -DCMAKE_BUILD_TYPE=Release "-DITERA_CUDA_ARCHS=${ITERA_CUDA_ARCHS:-80;89;90a}")
  cmake -S "$ITERA_ROOT" -B "$ITERA_BUILD_DIR" "${args[@]}" >&2
  cmake --build "$ITERA_BUILD_DIR" --parallel "$(nproc)" >&2
}

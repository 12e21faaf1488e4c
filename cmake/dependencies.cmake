# Every dependency comes from Debian's packages; scripts/setup installs them.
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)

# OpenBLAS: the cpu backend's GEMMs and the reference for verifying the cuda kernels.
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
add_library(itera_blas INTERFACE)
target_link_libraries(itera_blas INTERFACE PkgConfig::OPENBLAS)

if(ITERA_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(ITERA_BUILD_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# desk (issue 7): the rental desk service (cpp-httplib, SQLite, libpq, libsodium), Debian packages.
pkg_check_modules(DESK_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
pkg_check_modules(DESK_SQLITE REQUIRED IMPORTED_TARGET sqlite3)
pkg_check_modules(DESK_PQ REQUIRED IMPORTED_TARGET libpq)
pkg_check_modules(DESK_SODIUM REQUIRED IMPORTED_TARGET libsodium)

# multimodal (issue 4): image codecs for the test set and the CPU decode stage (libjpeg-turbo's
# TurboJPEG API, libpng), Debian packages.
pkg_check_modules(ITERA_TURBOJPEG REQUIRED IMPORTED_TARGET libturbojpeg)
pkg_check_modules(ITERA_PNG REQUIRED IMPORTED_TARGET libpng)

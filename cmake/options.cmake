option(ITERA_ENABLE_CUDA "Build the cuda backend when a CUDA toolkit is found" ON)
option(ITERA_BUILD_TESTS "Build the tests" ON)
option(ITERA_BUILD_BENCHMARKS "Build the Google Benchmark programs in bench/" ON)
# Release builds cover A100 (80), L4/L40S (89) and H100/H200 (90a). Narrow it for quick builds:
#   cmake -DITERA_CUDA_ARCHS=90a ...
set(ITERA_CUDA_ARCHS "80;89;90a" CACHE STRING "CUDA architectures to build (CMAKE_CUDA_ARCHITECTURES syntax)")
set(ITERA_WARNINGS -Wall -Wextra -Wpedantic -Wno-missing-field-initializers)

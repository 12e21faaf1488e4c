#!/usr/bin/env bash
# run 11: the final code (the shared multiply_tile / gemm_operand_map and norm_rows mend): the llm,
# fused-product and ViT device tests
set -uo pipefail
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
B=$PWD/bb/bin
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
timeout 280 $B/itera_device_tests --gtest_filter='llm*:vit*:-*timing*' > $OUT/tests.log 2>&1; echo "tests rc=$?"; tail -2 $OUT/tests.log; grep -E "^\[  FAILED|Failure" -A4 $OUT/tests.log | head -20

#!/bin/bash
# Session 2026-12-01 (sixteenth), run 1: cuBLASLt's batch-64 products with k cut into parts run as a strided batch
set -u
tar xzf bb.tgz
export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv | tee $OUT/run1_gpu.txt
ITERA_LLM_PRODUCTS_SEARCH=1 bb/bin/itera_device_tests --gtest_filter='*split_k_as_batch*' 2>&1 | tee $OUT/run1_split.log | grep -v "^\[" 
ITERA_LLM_TIMING_BATCH=64 bb/bin/itera_device_tests --gtest_filter='*decode_timing_llama*' > $OUT/run1_stages_b64.log 2>&1
tail -40 $OUT/run1_stages_b64.log

#!/usr/bin/env bash
# Session 26, call 7: the five llm device tests run 6 left (its 150 s timeout; all 163 s of them run before).
tar xJf bb.txz; export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64; timeout 200 bb/bin/itera_device_tests --gtest_filter='llm_fused_gemv.engine_batch_1_decode_matches_cpu_reference:llm_fused_gemv.first_prefill_over_used_memory_matches_cpu_reference:llm_fused_gemv.swiglu_product_matches_swiglu_then_gemv:llm_fused_products.*' > $OUT/rest.log 2>&1; echo rc=$?; grep -E "^\[ +(OK|FAILED|PASSED) |Failure" $OUT/rest.log

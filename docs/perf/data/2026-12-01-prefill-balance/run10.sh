#!/usr/bin/env bash
# run 10: every device test but the timings on 7323b3f (the bundle holds its itera_device_tests as dt_final)
tar xzf bb.tgz && export LD_LIBRARY_PATH=$PWD/bb/lib:/usr/local/cuda/lib64 && timeout 200 bb/bin/dt_final --gtest_filter='-*timing*' > $OUT/run10_device_tests_final.log 2>&1

# bench/ftrt_bench_ckpt: the measuring half of bench/ftrt-bench-ckpt (checkpoint stall, persist
# and restore throughput; docs/checkpoint.md "Measured"). Included from the top-level
# CMakeLists.txt.
add_executable(ftrt_bench_ckpt ${CMAKE_CURRENT_LIST_DIR}/ckpt_bench.c)
target_link_libraries(ftrt_bench_ckpt PRIVATE ftrt::ftrt)
set_target_properties(ftrt_bench_ckpt PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
# bench/dev_snapshot_bench.c: what a checkpoint of device memory blocks the trainer for, against
# a cudaMemcpyAsync into pinned memory of the same bytes, in the same run (scripts/gpu-run.sh
# step snapshot-gpu; with FTRT_TEST_SIM_DEVICE=1 a rehearsal on the simulated device).
if(TARGET ftrt_gpu)
  add_executable(dev_snapshot_bench ${CMAKE_CURRENT_LIST_DIR}/dev_snapshot_bench.c)
  target_link_libraries(dev_snapshot_bench PRIVATE ftrt::ftrt_gpu CUDA::cudart)
  set_target_properties(dev_snapshot_bench PROPERTIES LINKER_LANGUAGE C
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endif()

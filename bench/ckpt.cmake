# bench/ftrt_bench_ckpt: the measuring half of bench/ftrt-bench-ckpt (checkpoint stall, persist
# and restore throughput; docs/checkpoint.md "Measured"). Included from the top-level
# CMakeLists.txt.
add_executable(ftrt_bench_ckpt ${CMAKE_CURRENT_LIST_DIR}/ckpt_bench.c)
target_link_libraries(ftrt_bench_ckpt PRIVATE ftrt::ftrt)
set_target_properties(ftrt_bench_ckpt PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

# bench/overlap_bench: exposed communication of overlapped, bucketed allreduces (see the file's
# header; docs/collectives.md). Included from the top-level CMakeLists.txt.
add_executable(overlap_bench ${CMAKE_CURRENT_LIST_DIR}/overlap_bench.c)
target_link_libraries(overlap_bench PRIVATE ftrt::ftrt m)
set_target_properties(overlap_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
# The NCCL plane's version (bench/overlap_gpu_bench.c), built with the CUDA toolkit and NCCL.
if(TARGET ftrt_gpu_internal)
  add_executable(overlap_gpu_bench ${CMAKE_CURRENT_LIST_DIR}/overlap_gpu_bench.c)
  target_link_libraries(overlap_gpu_bench PRIVATE ftrt_gpu_internal m)
  set_target_properties(overlap_gpu_bench PROPERTIES LINKER_LANGUAGE C
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endif()

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
# bench/nccl_rebuild_bench.c: a communicator without the dead rank, ncclCommShrink against a
# full re-init, in the same run (plain MPI + NCCL + CUDA, no ftrt; exit 77 where nccl.h has no
# ncclCommShrink). scripts/gpu-run.sh step nccl-rebuild.
if(TARGET ftrt_gpu_internal)
  add_executable(nccl_rebuild_bench ${CMAKE_CURRENT_LIST_DIR}/nccl_rebuild_bench.c)
  target_include_directories(nccl_rebuild_bench PRIVATE ${FTRT_NCCL_INCLUDE_DIR})
  target_link_libraries(nccl_rebuild_bench PRIVATE MPI::MPI_C CUDA::cudart ${FTRT_NCCL_LIBRARY})
  set_target_properties(nccl_rebuild_bench PROPERTIES LINKER_LANGUAGE C
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endif()
# bench/pack_gpu_bench.c: the NCCL plane's pack and unpack kernels (kernels/kernels.cu) against
# cudaMemcpyAsync D2D of the same bytes, in the same run (exit 77 without a usable device). The
# kernels only: no NCCL, no MPI. scripts/gpu-run.sh step pack-gpu.
if(TARGET ftrt_gpu_kernels)
  add_executable(pack_gpu_bench ${CMAKE_CURRENT_LIST_DIR}/pack_gpu_bench.c)
  target_link_libraries(pack_gpu_bench PRIVATE ftrt_gpu_kernels)
  set_target_properties(pack_gpu_bench PROPERTIES LINKER_LANGUAGE C
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endif()
# bench/rsag_bench: ftrt_reduce_scatter / ftrt_allgather against MPI_Reduce_scatter_block /
# MPI_Allgather in the same job (see the file's header; bench/rsag_bench.sh runs it).
add_executable(rsag_bench ${CMAKE_CURRENT_LIST_DIR}/rsag_bench.c)
target_link_libraries(rsag_bench PRIVATE ftrt::ftrt MPI::MPI_C)
set_target_properties(rsag_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
# bench/ordered_bench: ftrt_allreduce_ordered against MPI_Iallreduce and ftrt_allreduce in the
# same job (see the file's header; bench/ordered_bench.sh runs it).
add_executable(ordered_bench ${CMAKE_CURRENT_LIST_DIR}/ordered_bench.c)
target_link_libraries(ordered_bench PRIVATE ftrt::ftrt MPI::MPI_C)
set_target_properties(ordered_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

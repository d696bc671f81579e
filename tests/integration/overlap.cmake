# Overlapped collectives under real mpirun jobs with killed trainers (overlap_itest.py), included
# from tests/integration/CMakeLists.txt.
add_executable(overlap_job ${CMAKE_CURRENT_LIST_DIR}/overlap_job.c)
target_link_libraries(overlap_job PRIVATE ftrt::ftrt MPI::MPI_C m)
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(overlap_job PRIVATE -ffp-contract=off) # bitwise-reproducible float math
endif()
set(OVERLAP_ITEST ${FTRT_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/overlap_itest.py
    --bin $<TARGET_FILE:overlap_job> --work ${CMAKE_CURRENT_BINARY_DIR}/overlap)
add_test(NAME overlap.reference COMMAND ${OVERLAP_ITEST} reference)
set_tests_properties(overlap.reference PROPERTIES FIXTURES_SETUP ftrt_overlap_reference)
foreach(case IN ITEMS inline funneled kill kill0)
  add_test(NAME overlap.${case} COMMAND ${OVERLAP_ITEST} ${case})
  set_tests_properties(overlap.${case} PROPERTIES FIXTURES_REQUIRED ftrt_overlap_reference)
endforeach()
set_tests_properties(overlap.reference overlap.inline overlap.funneled overlap.kill overlap.kill0
  PROPERTIES
  TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)
# The same job linked with libftrt_gpu (CUDA runtime + NCCL inside): it must load and train on
# the CPU plane where there is no GPU driver, byte-identical to the reference.
if(TARGET ftrt_gpu)
  add_executable(overlap_job_gpulib ${CMAKE_CURRENT_LIST_DIR}/overlap_job.c)
  target_link_libraries(overlap_job_gpulib PRIVATE ftrt::ftrt_gpu MPI::MPI_C m)
  set_target_properties(overlap_job_gpulib PROPERTIES LINKER_LANGUAGE C)
  if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(overlap_job_gpulib PRIVATE -ffp-contract=off)
  endif()
  add_test(NAME overlap.gpulib COMMAND ${FTRT_PYTHON3} ${CMAKE_CURRENT_LIST_DIR}/overlap_itest.py
    --bin $<TARGET_FILE:overlap_job_gpulib> --work ${CMAKE_CURRENT_BINARY_DIR}/overlap gpulib)
  set_tests_properties(overlap.gpulib PROPERTIES FIXTURES_REQUIRED ftrt_overlap_reference
    TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS mpi RUN_SERIAL TRUE)
endif()

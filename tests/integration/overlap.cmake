# Overlapped collectives under real mpirun jobs with killed trainers (overlap_itest.py) and the
# fixed-order allreduce (ordered_itest.py), included
# from tests/integration/CMakeLists.txt.
add_executable(overlap_job ${CMAKE_CURRENT_LIST_DIR}/overlap_job.c)
target_link_libraries(overlap_job PRIVATE ftrt::ftrt MPI::MPI_C m)
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(overlap_job PRIVATE -ffp-contract=off) # bitwise-reproducible float math
endif()
# overlap.reference (fixture ftrt_overlap_reference), inline, funneled, kill, kill0: the cases
# of `overlap_itest.py --list` (ftrt_py_cases, tests/integration/CMakeLists.txt).
ftrt_py_cases(overlap ftrt_overlap_reference ${CMAKE_CURRENT_LIST_DIR}/overlap_itest.py
  --bin $<TARGET_FILE:overlap_job> --work ${CMAKE_CURRENT_BINARY_DIR}/overlap)
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

# The recovery's state transfer between real processes (comm/transfer.c): striping, a
# corrupted chunk caught by its CRC32C and resent, FTRT_ECORRUPT when every source is bad;
# with 32 huge pages reserved for the test (with-huge-pages.sh), also into ftrt_alloc()
# memory that the sources map.
add_executable(xfer_job ${CMAKE_CURRENT_LIST_DIR}/xfer_job.c)
target_link_libraries(xfer_job PRIVATE ftrt_internal)
add_test(NAME mpi.xfer COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/with-huge-pages.sh 32
  ${MPIEXEC_EXECUTABLE} --oversubscribe --bind-to none
  --mca mpi_yield_when_idle 1 -np 4 $<TARGET_FILE:xfer_job>)
set_tests_properties(mpi.xfer PROPERTIES TIMEOUT 300 LABELS mpi RUN_SERIAL TRUE
  RESOURCE_LOCK hugepages
  ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;FTRT_LOG=error")

# The fixed-order allreduce (ftrt_allreduce_ordered, comm/ordered.c; issue 35): 4 logical ranks
# held by 4, 3, 2 and 1 trainers, byte for byte against the logical-order sum and across the
# layouts, bad arguments refused everywhere alike (ordered_itest.py; ctest ordered.layouts).
add_executable(ordered_job ${CMAKE_CURRENT_LIST_DIR}/ordered_job.c)
target_link_libraries(ordered_job PRIVATE ftrt::ftrt)
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(ordered_job PRIVATE -ffp-contract=off) # the reference in plain adds
endif()
ftrt_py_cases(ordered none ${CMAKE_CURRENT_LIST_DIR}/ordered_itest.py
  --bin $<TARGET_FILE:ordered_job> --work ${CMAKE_CURRENT_BINARY_DIR}/ordered)

# GPU unit tests, included from tests/CMakeLists.txt when kernels/ built its CUDA targets. Each
# exits 77 (skipped) when cudaGetDeviceCount finds no usable device (no GPU, or no driver).
function(ftrt_gpu_unit name lib)
  if(NOT EXISTS ${PROJECT_SOURCE_DIR}/tests/unit/test_${name}.c)
    return()
  endif()
  add_executable(test_${name} ${PROJECT_SOURCE_DIR}/tests/unit/test_${name}.c
    ${PROJECT_SOURCE_DIR}/tests/unit/helpers.c)
  target_link_libraries(test_${name} PRIVATE ${lib} PkgConfig::CMOCKA)
  set_target_properties(test_${name} PROPERTIES LINKER_LANGUAGE C)
  add_test(NAME unit.${name} COMMAND test_${name})
  set_tests_properties(unit.${name} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77 LABELS "unit;gpu")
endfunction()
ftrt_gpu_unit(kernels_gpu "ftrt_gpu_kernels;ftrt_internal")
if(TARGET ftrt_gpu_internal) # with NCCL: libftrt_gpu's sources (the checkpoint hook, the plane)
  # ftrt_gpu_kernels (device_snapshot.c) uses base/ objects of ftrt_gpu_internal: named again after it
  ftrt_gpu_unit(dev_snapshot "ftrt_gpu_internal;ftrt_gpu_kernels;ftrt_gpu_internal")
  ftrt_gpu_unit(nccl ftrt_gpu_internal)
endif()
# Without CUDA the tree must still configure, build and run the CPU plane (not in sanitizer
# builds, like install.package).
if(NOT FTRT_SANITIZE)
  add_test(NAME build.nocuda COMMAND bash ${PROJECT_SOURCE_DIR}/kernels/check_nocuda.sh
    ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR}/nocuda-check)
  set_tests_properties(build.nocuda PROPERTIES TIMEOUT 600 LABELS unit)
endif()

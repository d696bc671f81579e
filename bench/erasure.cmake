# bench/erasure_bench: the local kernels of erasure-coded redundancy groups (ISA-L) against
# memcpy of the same bytes (see the file's header). Built only with ISA-L. Included from the
# top-level CMakeLists.txt.
if(FTRT_HAVE_ISAL)
  add_executable(erasure_bench ${CMAKE_CURRENT_LIST_DIR}/erasure_bench.c)
  target_link_libraries(erasure_bench PRIVATE ftrt_internal)
  set_target_properties(erasure_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endif()

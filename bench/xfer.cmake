# bench/xfer_bench: the recovery's state transfer against a local copy + CRC32C of the same
# bytes, with its parts (see the file's header; bench/mttr_size.py runs it). Included from the
# top-level CMakeLists.txt.
add_executable(xfer_bench ${CMAKE_CURRENT_LIST_DIR}/xfer_bench.c)
target_link_libraries(xfer_bench PRIVATE ftrt_internal)
set_target_properties(xfer_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

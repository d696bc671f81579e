# bench/overlap_bench: exposed communication of overlapped, bucketed allreduces (see the file's
# header; README "Overlapped collectives"). Included from the top-level CMakeLists.txt.
add_executable(overlap_bench ${CMAKE_CURRENT_LIST_DIR}/overlap_bench.c)
target_link_libraries(overlap_bench PRIVATE ftrt::ftrt m)
set_target_properties(overlap_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

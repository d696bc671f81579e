# bench/commit_scale: the checkpoint commit at 16,384+ shards (see the file's header;
# bench/commit_scale.py runs it before and after). It links the internal archive (checkpoint/
# commit.h). Included from the top-level CMakeLists.txt.
add_executable(commit_scale ${CMAKE_CURRENT_LIST_DIR}/commit_scale.c)
target_link_libraries(commit_scale PRIVATE ftrt_internal m)
set_target_properties(commit_scale PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

# bench/comm_group: MPI_Comm_create_group over the world for every process but one (a
# recovery's communicator) against a barrier and an allreduce (see the file's header;
# bench/comm_group.sh runs it at several sizes). Included from the top-level CMakeLists.txt.
add_executable(comm_group ${CMAKE_CURRENT_LIST_DIR}/comm_group.c)
target_link_libraries(comm_group PRIVATE MPI::MPI_C)
set_target_properties(comm_group PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

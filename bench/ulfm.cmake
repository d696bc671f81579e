# bench/ulfm_rebuild: the cost of a recovery's communicator rebuild under ULFM, and why ftrt
# neither revokes nor shrinks there (see the file's header; comm/ulfm.h; docs/benchmarks.md
# "Open MPI 5 with ULFM"). Built only against an MPI with ULFM and MPI-4 (Open MPI 5:
# FTRT_MPI_HAS_ULFM, set by the top-level CMakeLists.txt). Included from there.
if(FTRT_MPI_HAS_ULFM)
  add_executable(ulfm_rebuild ${CMAKE_CURRENT_LIST_DIR}/ulfm_rebuild.c)
  target_link_libraries(ulfm_rebuild PRIVATE MPI::MPI_C)
  set_target_properties(ulfm_rebuild PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
endif()

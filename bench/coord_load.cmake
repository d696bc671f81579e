# bench/coord_load: load generator for the coordinator at scale (see the file's header; README
# "The coordinator at scale"; bench/coord_scale.py runs it over several sizes). It links the
# internal archive: it starts the real coordinator (ftrt__coordinator_run) in a child process.
# Its files: coord_load.c (options, main's steps), coord_load_gen.c (simulated ranks, worker
# threads), coord_load_hosts.c (simulated host agents, relay groups), coord_load_phases.c
# (commits, trials, the end), coord_load_measure.c (readings, steady state, the report).
# Included from the top-level CMakeLists.txt.
add_executable(coord_load ${CMAKE_CURRENT_LIST_DIR}/coord_load.c
  ${CMAKE_CURRENT_LIST_DIR}/coord_load_gen.c ${CMAKE_CURRENT_LIST_DIR}/coord_load_hosts.c
  ${CMAKE_CURRENT_LIST_DIR}/coord_load_phases.c ${CMAKE_CURRENT_LIST_DIR}/coord_load_measure.c)
target_link_libraries(coord_load PRIVATE ftrt_internal m)
set_target_properties(coord_load PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)

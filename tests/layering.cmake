# Checks every source file's #include "..." lines against the dependency
# rules of docs/ARCHITECTURE.md ("Dependencies"): a folder includes only
# itself and the folders below it. Tests under tests/<folder>/ follow
# <folder>'s rule, for the source folders and for tests/<folder>/ helpers
# alike; top-level helpers such as tests/baton_binary.h (which runs the
# binary as a user does, linking nothing) count as common; bench/ may use
# everything. Run by ctest as
#   cmake -DSOURCE_DIR=<repo> -P tests/layering.cmake

set(rule_common common)
set(rule_config common config)
set(rule_models common models)
set(rule_data common data)
set(rule_optim common config optim)
set(rule_parallel common config models parallel)
set(rule_trainer common config models data optim parallel trainer)
set(rule_checkpoint ${rule_trainer} checkpoint)
set(rule_builders ${rule_checkpoint} builders)
set(rule_planner ${rule_builders} planner)
set(rule_app ${rule_planner} app)
set(folders common config models data optim parallel trainer checkpoint
    builders planner app)

# The folder whose rule `path` follows: its top folder, or for
# tests/<folder>/... that folder (a file right under tests/: common).
function(rule_folder path out)
  string(REPLACE "/" ";" parts ${path})
  list(GET parts 0 folder)
  if(folder STREQUAL "tests")
    list(LENGTH parts depth)
    set(folder common)
    if(depth GREATER 2)
      list(GET parts 1 folder)
    endif()
  endif()
  set(${out} ${folder} PARENT_SCOPE)
endfunction()

set(violations "")
set(checked 0)
foreach(folder ${folders} bench tests)
  file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR}
       ${SOURCE_DIR}/${folder}/*.h ${SOURCE_DIR}/${folder}/*.cpp)
  foreach(source ${sources})
    rule_folder(${source} owner)
    if(folder STREQUAL "bench")
      continue()
    endif()
    if(NOT DEFINED rule_${owner})
      list(APPEND violations "${source}: no rule for folder '${owner}'")
      continue()
    endif()
    file(STRINGS ${SOURCE_DIR}/${source} includes REGEX "^#include \"")
    foreach(line ${includes})
      string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" header "${line}")
      rule_folder(${header} used)
      list(FIND rule_${owner} ${used} allowed)
      if(allowed LESS 0)
        string(REPLACE ";" ", " may "${rule_${owner}}")
        list(APPEND violations
             "${source}: includes ${header}, but the ${owner} rule allows only: ${may}")
      endif()
      math(EXPR checked "${checked} + 1")
    endforeach()
  endforeach()
endforeach()

if(violations)
  list(JOIN violations "\n  " text)
  message(FATAL_ERROR "[layering] includes against the dependency rules:\n  ${text}")
endif()
message(STATUS "[layering] ${checked} includes follow the dependency rules")

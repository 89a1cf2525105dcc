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
set(rule_app ${rule_builders} app)
set(rule_bench ${rule_app} bench tests)
set(folders common config models data optim parallel trainer checkpoint
    builders app)

set(violations "")
set(checked 0)
foreach(folder ${folders} bench tests)
  file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR}
       ${SOURCE_DIR}/${folder}/*.h ${SOURCE_DIR}/${folder}/*.cpp)
  foreach(source ${sources})
    # The rule: the file's own folder, or for tests/<folder>/... that
    # folder's (tests/baton_binary.h and other top-level helpers: app's).
    string(REPLACE "/" ";" parts ${source})
    list(GET parts 0 top)
    set(owner ${top})
    set(prefix "")
    if(top STREQUAL "tests")
      list(LENGTH parts depth)
      set(owner app)
      if(depth GREATER 2)
        list(GET parts 1 owner)
      endif()
      set(prefix "tests/")
    endif()
    if(NOT DEFINED rule_${owner})
      list(APPEND violations "${source}: no rule for folder '${owner}'")
      continue()
    endif()
    file(STRINGS ${SOURCE_DIR}/${source} includes REGEX "^#include \"")
    foreach(line ${includes})
      string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" header "${line}")
      string(REPLACE "/" ";" header_parts ${header})
      list(GET header_parts 0 header_top)
      set(used ${header_top})
      if(header_top STREQUAL "tests")
        list(LENGTH header_parts header_depth)
        set(used common)
        if(header_depth GREATER 2)
          list(GET header_parts 1 used)
        endif()
      endif()
      list(FIND rule_${owner} ${used} allowed)
      if(owner STREQUAL "bench")
        set(allowed 0)
      endif()
      if(allowed LESS 0)
        string(REPLACE ";" ", " may "${rule_${owner}}")
        list(APPEND violations
             "${source}: includes ${header}, but ${prefix}${owner}/ may use only: ${may}")
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

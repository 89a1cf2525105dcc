# The SDK as a user meets it: installs the build into a fresh prefix, checks
# what the prefix holds (the package, the public headers and not the
# private ones), then configures and builds examples/local_sgd out of tree
# against it, as docs/extending.md says. The plugin it leaves in
# EXAMPLE_BUILD is what tests/app/plugin_test.cpp loads (a ctest fixture).
# Last, a project naming another libtorch (Torch_DIR) must be refused at
# configure time, saying which. Run by ctest as
#   cmake -DBUILD_DIR=<build> -DSOURCE_DIR=<repo> -DPREFIX=<tmp> \
#         -DEXAMPLE_BUILD=<tmp> -P tests/example.cmake

foreach(var BUILD_DIR SOURCE_DIR PREFIX EXAMPLE_BUILD)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "example.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run)
  execute_process(COMMAND ${ARGN}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " command "${ARGN}")
    message(FATAL_ERROR "${command} failed (${rc}):\n${out}")
  endif()
endfunction()

file(REMOVE_RECURSE ${PREFIX} ${EXAMPLE_BUILD} ${EXAMPLE_BUILD}.refused)
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX})
foreach(file
    bin/baton
    lib/libbaton_app.so
    lib/libbaton_common.so
    lib/cmake/Baton/BatonConfig.cmake
    lib/cmake/Baton/BatonTargets.cmake
    include/baton/common/plugin.h
    include/baton/common/version.h
    include/baton/parallel/parallelism.h
    include/baton/optim/optimizers.h
    include/baton/app/run.h)
  if(NOT EXISTS ${PREFIX}/${file})
    message(FATAL_ERROR "the install has no ${file}")
  endif()
endforeach()
foreach(file
    include/baton/config/config_detail.h
    include/baton/checkpoint/checkpoint_detail.h
    include/baton/app/cli.h)
  if(EXISTS ${PREFIX}/${file})
    message(FATAL_ERROR "the install has the private header ${file}")
  endif()
endforeach()

set(configure ${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/local_sgd
    -DCMAKE_PREFIX_PATH=${PREFIX} -DCMAKE_BUILD_TYPE=Release)
find_program(CCACHE ccache)
if(CCACHE)
  list(APPEND configure -DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE})
endif()
run(${configure} -B ${EXAMPLE_BUILD})
run(${CMAKE_COMMAND} --build ${EXAMPLE_BUILD} -j2)
if(NOT EXISTS ${EXAMPLE_BUILD}/libbaton_local_sgd.so)
  message(FATAL_ERROR "the example built no libbaton_local_sgd.so")
endif()

# Another libtorch: a Torch_DIR whose package is 2.0.0.
set(fake ${EXAMPLE_BUILD}.refused/torch-2.0.0)
file(WRITE ${fake}/TorchConfigVersion.cmake "set(PACKAGE_VERSION 2.0.0)\n")
file(WRITE ${fake}/TorchConfig.cmake "set(Torch_FOUND TRUE)\n")
execute_process(
  COMMAND ${configure} -B ${EXAMPLE_BUILD}.refused/build -DTorch_DIR=${fake}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
string(REGEX REPLACE "[ \n]+" " " flat "${out}")
set(expected "but Torch_DIR is libtorch 2.0.0 (${fake})")
string(FIND "${flat}" "${expected}" at)
string(FIND "${flat}" "was built with libtorch" built_at)
if(rc EQUAL 0 OR at EQUAL -1 OR built_at EQUAL -1)
  message(FATAL_ERROR
    "configuring with another libtorch: expected a failure saying "
    "'${expected}', got ${rc}:\n${out}")
endif()
file(REMOVE_RECURSE ${EXAMPLE_BUILD}.refused)

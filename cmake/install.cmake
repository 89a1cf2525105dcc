# What `cmake --install` puts in the prefix: the binary, the SentencePiece
# plugin, and the SDK an extension builds against (docs/extending.md):
#
#   bin/baton
#   lib/libbaton_*.so                     the shared libraries
#   lib/baton/libbaton_sentencepiece.so
#   include/baton/...                     the public headers
#   lib/cmake/Baton/                      find_package(Baton): Baton::baton
#
# The public headers are those an extension includes (below) and every
# Baton header they include, found by following their #include lines; the
# rest stay private.

set(BATON_LIBRARIES baton_common baton_config baton_models baton_data
    baton_optim baton_parallel baton_trainer baton_checkpoint baton_builders
    baton_planner baton_app)

# Baton::baton: every library, and what a program or plugin built against
# them must share with them (the NCCL backend's define, OpenMP, libstdc++
# first among the needed libraries: see CMakeLists.txt).
add_library(baton_sdk INTERFACE)
set_target_properties(baton_sdk PROPERTIES EXPORT_NAME baton)
target_link_libraries(baton_sdk INTERFACE ${BATON_LIBRARIES})
target_compile_features(baton_sdk INTERFACE cxx_std_20)
target_compile_options(baton_sdk INTERFACE ${OpenMP_CXX_FLAGS})
# The OpenMP runtime the libraries run on (the wheel's, CMakeLists.txt):
# code compiled with OpenMP links it directly.
if(EXISTS ${BATON_TORCH_DIR}/lib/libgomp.so.1)
  target_link_libraries(baton_sdk INTERFACE ${BATON_TORCH_DIR}/lib/libgomp.so.1)
else()
  target_link_options(baton_sdk INTERFACE ${OpenMP_CXX_FLAGS})
endif()
target_link_options(baton_sdk INTERFACE
  "SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state")
if(BATON_TORCH_CUDA)
  target_compile_definitions(baton_sdk INTERFACE USE_C10D_NCCL)
endif()

install(TARGETS baton RUNTIME DESTINATION bin)
install(TARGETS baton_sentencepiece LIBRARY DESTINATION lib/baton)
install(TARGETS ${BATON_LIBRARIES} baton_sdk EXPORT BatonTargets
  LIBRARY DESTINATION lib)
install(EXPORT BatonTargets NAMESPACE Baton:: DESTINATION lib/cmake/Baton)

# The headers an extension starts from: the plugin handshake, the command
# line as a function, the console, and the registries with what they
# register.
set(BATON_PUBLIC_HEADERS
  common/plugin.h
  common/logging.h
  common/registry.h
  app/run.h
  config/job_config.h
  config/parallel_dims.h
  parallel/parallelism.h
  parallel/applier.h
  parallel/axes.h
  parallel/grad_sync.h
  parallel/model_parts.h
  parallel/dist/mesh.h
  parallel/dist/process_group.h
  optim/optimizers.h
  optim/optimizer_state.h
  optim/lr_schedulers.h
  data/dataset.h
  data/tokenizer.h
  models/model_spec.h
  models/common/transformer.h
  trainer/trainer.h
  builders/trainer_builder.h
  builders/pipeline_trainer_builder.h
  builders/builder_registry.h)

# Follows the #include "..." lines of `headers` to every Baton header they
# reach; the generated ones (common/version.h, common/paths.h) are taken
# from the build folder.
function(baton_header_closure out)
  set(todo ${ARGN})
  set(seen)
  while(todo)
    list(POP_FRONT todo header)
    if(header IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${header})
    if(EXISTS ${PROJECT_SOURCE_DIR}/${header})
      set(file ${PROJECT_SOURCE_DIR}/${header})
    elseif(EXISTS ${PROJECT_BINARY_DIR}/generated/${header})
      set(file ${PROJECT_BINARY_DIR}/generated/${header})
    else()
      message(FATAL_ERROR "public header ${header}: no such file")
    endif()
    file(STRINGS ${file} includes REGEX "^#include \"[^\"]+\"")
    foreach(line ${includes})
      string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" included "${line}")
      list(APPEND todo ${included})
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()

baton_header_closure(_baton_headers ${BATON_PUBLIC_HEADERS})
foreach(header ${_baton_headers})
  get_filename_component(dir ${header} DIRECTORY)
  if(EXISTS ${PROJECT_SOURCE_DIR}/${header})
    install(FILES ${PROJECT_SOURCE_DIR}/${header}
            DESTINATION include/baton/${dir})
  else()
    install(FILES ${PROJECT_BINARY_DIR}/generated/${header}
            DESTINATION include/baton/${dir})
  endif()
endforeach()

# The package: BatonConfig.cmake records the libtorch Baton was built with
# (cmake/BatonConfig.cmake.in) and defines `torch` from it the way
# cmake/torch.cmake did here, which it installs beside itself.
include(CMakePackageConfigHelpers)
configure_file(cmake/BatonConfig.cmake.in
               ${PROJECT_BINARY_DIR}/package/BatonConfig.cmake @ONLY)
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/package/BatonConfigVersion.cmake
  COMPATIBILITY ExactVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/BatonConfig.cmake
              ${PROJECT_BINARY_DIR}/package/BatonConfigVersion.cmake
              cmake/torch.cmake
        DESTINATION lib/cmake/Baton)

# Finds the libtorch of a PyTorch wheel and defines the target `torch` that
# every Baton library links.
#
# The wheel is found through its Python: BATON_TORCH_PYTHON (the Makefile
# passes the venv scripts/setup.sh made), asked for
# torch.utils.cmake_prefix_path (where torch does not import, as in the
# CPU-only install without its NVIDIA libraries, the same folder by the
# package's location); or, for a libtorch found another way, through
# CMAKE_PREFIX_PATH / Torch_DIR as usual.
#
# With the CUDA toolkit, the wheel's own CMake config (TorchConfig.cmake)
# defines `torch` with CUDA, and Baton's NCCL backend is compiled
# (USE_C10D_NCCL). Without one that config stops with a fatal error (it
# looks for nvcc and the CUDA headers), so Baton defines `torch` itself from
# the wheel's CPU libraries, libtorch_cpu and libc10: a CPU-only Baton that
# needs none of the NVIDIA libraries at run time.
#
# Sets BATON_TORCH_DIR (the wheel's torch/ folder), BATON_TORCH_VERSION and
# BATON_TORCH_CUDA (ON when built with CUDA). The installed package
# (cmake/BatonConfig.cmake.in) includes it too, with BATON_TORCH_DIR and
# BATON_TORCH_CUDA set to what Baton was built with.

set(BATON_TORCH_PYTHON "" CACHE FILEPATH
    "The Python whose PyTorch wheel Baton builds against")
set(BATON_TORCH_CUDA AUTO CACHE STRING
    "Build with the wheel's CUDA libraries: AUTO (where the CUDA toolkit is), ON, OFF")

if(BATON_TORCH_DIR)
  list(PREPEND CMAKE_PREFIX_PATH ${BATON_TORCH_DIR}/share/cmake)
elseif(BATON_TORCH_PYTHON)
  execute_process(
    COMMAND ${BATON_TORCH_PYTHON} -c
      "import importlib.util, os
try:
    import torch, torch.utils
    print(torch.utils.cmake_prefix_path)
    print(os.path.dirname(torch.__file__))
except (ImportError, OSError):  # the CPU-only install: no NVIDIA libraries
    d = os.path.dirname(importlib.util.find_spec('torch').origin)
    print(os.path.join(d, 'share', 'cmake'))
    print(d)"
    OUTPUT_VARIABLE _torch_paths ERROR_VARIABLE _torch_error
    RESULT_VARIABLE _torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _torch_rc EQUAL 0)
    message(FATAL_ERROR
      "BATON_TORCH_PYTHON=${BATON_TORCH_PYTHON} cannot import torch "
      "(run scripts/setup.sh, or `make`, which runs it):\n${_torch_error}")
  endif()
  string(REPLACE "\n" ";" _torch_paths "${_torch_paths}")
  list(GET _torch_paths 0 _torch_prefix)
  list(GET _torch_paths 1 BATON_TORCH_DIR)
  list(PREPEND CMAKE_PREFIX_PATH ${_torch_prefix})
else()
  find_path(_torch_config TorchConfig.cmake
    PATH_SUFFIXES share/cmake/Torch lib/cmake/Torch REQUIRED)
  get_filename_component(BATON_TORCH_DIR "${_torch_config}/../../.." ABSOLUTE)
endif()

# AUTO: CUDA where the toolkit is and the wheel came with its NVIDIA wheels
# (scripts/setup.sh installs them only where it finds the toolkit too).
get_filename_component(_site ${BATON_TORCH_DIR} DIRECTORY)
if(BATON_TORCH_CUDA STREQUAL AUTO)
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND AND EXISTS ${BATON_TORCH_DIR}/lib/libtorch_cuda.so
     AND EXISTS ${_site}/nvidia/nccl)
    set(BATON_TORCH_CUDA ON)
  else()
    set(BATON_TORCH_CUDA OFF)
  endif()
endif()

if(BATON_TORCH_CUDA)
  # Baton compiles no CUDA kernels of its own: name the architectures, so
  # that the config does not compile a probe for the machine's GPUs (which
  # CMake 3.25 cannot build with CUDA 13's nvcc in C++20).
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0;10.0")
  endif()
  find_package(Torch REQUIRED)
  message(STATUS "libtorch ${Torch_VERSION} with CUDA ${CUDAToolkit_VERSION}"
                 " from ${BATON_TORCH_DIR}: building the NCCL backend")
  set(BATON_TORCH_VERSION ${Torch_VERSION})
else()
  foreach(lib torch_cpu c10)
    if(NOT EXISTS ${BATON_TORCH_DIR}/lib/lib${lib}.so)
      message(FATAL_ERROR "no lib${lib}.so in ${BATON_TORCH_DIR}/lib")
    endif()
  endforeach()
  # The version the wheel's CMake package declares (its header moved
  # between releases).
  include(${BATON_TORCH_DIR}/share/cmake/Torch/TorchConfigVersion.cmake)
  set(BATON_TORCH_VERSION ${PACKAGE_VERSION})
  # As the wheel's Caffe2Targets.cmake defines torch_cpu, less CUDA.
  add_library(torch SHARED IMPORTED)
  set_target_properties(torch PROPERTIES
    IMPORTED_LOCATION ${BATON_TORCH_DIR}/lib/libtorch_cpu.so
    INTERFACE_INCLUDE_DIRECTORIES
      "${BATON_TORCH_DIR}/include;${BATON_TORCH_DIR}/include/torch/csrc/api/include"
    INTERFACE_COMPILE_DEFINITIONS "USE_DISTRIBUTED;USE_C10D_GLOO"
    INTERFACE_COMPILE_OPTIONS "-D_GLIBCXX_USE_CXX11_ABI=1"
    INTERFACE_LINK_LIBRARIES ${BATON_TORCH_DIR}/lib/libc10.so)
  # libtorch_cpu needs the CUDA runtime and CUPTI to load (its profiler
  # links them) but names no path to them (Python's `import torch` loads
  # them first). Every binary loads the wheels' copies first, by name and
  # RUNPATH, so that libtorch_cpu finds them loaded; where none is
  # installed, the system's (a toolkit's) serve.
  file(GLOB _cuda_runtime ${_site}/nvidia/*/lib/libcudart.so.*
                          ${_site}/nvidia/*/lib/libcupti.so.*)
  if(_cuda_runtime)
    set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_LIBRARIES
      "-Wl,--push-state,--no-as-needed" ${_cuda_runtime} "-Wl,--pop-state")
    foreach(lib ${_cuda_runtime})
      get_filename_component(dir ${lib} DIRECTORY)
      list(PREPEND CMAKE_BUILD_RPATH ${dir})
      list(PREPEND CMAKE_INSTALL_RPATH ${dir})
    endforeach()
  endif()
  message(STATUS "libtorch ${BATON_TORCH_VERSION} (CPU libraries only: "
                 "BATON_TORCH_CUDA=${BATON_TORCH_CUDA}, CUDA toolkit found: "
                 "${CUDAToolkit_FOUND}) from ${BATON_TORCH_DIR}")
endif()

# c10d's NCCL header includes <nccl.h>: the wheel's comes in the nvidia-nccl
# wheel beside it (the version libtorch_cuda loads), else the toolkit's.
if(BATON_TORCH_CUDA)
  # libtorch_cuda needs the NVIDIA libraries of the wheels it came with
  # (its NCCL, cuDNN, cuBLAS), which may be newer than the toolkit's: the
  # toolkit's libnccl 2.28 lacks symbols the wheel's 2.30 has. Link against
  # and run with the wheels' copies, found before the toolkit's (whose
  # headers and nvcc are all the build takes from it).
  file(GLOB _nvidia_lib_dirs LIST_DIRECTORIES true ${_site}/nvidia/*/lib)
  foreach(dir ${_nvidia_lib_dirs})
    add_link_options(LINKER:-rpath-link,${dir})
  endforeach()
  list(PREPEND CMAKE_BUILD_RPATH ${_nvidia_lib_dirs})
  list(PREPEND CMAKE_INSTALL_RPATH ${_nvidia_lib_dirs})
  find_path(NCCL_INCLUDE_DIR nccl.h
    HINTS ${_site}/nvidia/nccl/include ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  include_directories(SYSTEM ${NCCL_INCLUDE_DIR})
endif()

# Gloo's headers (ProcessGroupGloo.hpp includes them; the wheel ships none):
# the wheel's own where a libtorch has them, else Debian's libgloo-dev. Gloo's
# code is inside libtorch_cpu: Baton links no other Gloo.
find_path(GLOO_INCLUDE_DIR gloo/algorithm.h
  HINTS ${BATON_TORCH_DIR}/include REQUIRED)

# The floor, where the source tree is (not in an installed package).
if(EXISTS ${CMAKE_CURRENT_LIST_DIR}/../scripts/versions.env)
  file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/../scripts/versions.env _floor_line
       REGEX "^BATON_TORCH_FLOOR=")
  string(REGEX MATCH "[0-9.]+$" _floor "${_floor_line}")
  if(BATON_TORCH_VERSION VERSION_LESS _floor)
    message(FATAL_ERROR
      "libtorch ${BATON_TORCH_VERSION} is older than Baton's floor, ${_floor} "
      "(scripts/versions.env)")
  endif()
endif()

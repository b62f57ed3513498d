# The CUDA backend's build (included by CMakeLists.txt when CGRAD_CUDA is ON): the architectures to
# compile for, the toolkit, and the optional libraries cuDNN (with its C++ frontend) and NCCL. Each choice
# is printed as one "cgrad: ..." line at configure time, saying what was found and how to change it.

# ---- architectures -------------------------------------------------------------------------------------
# Given (-DCMAKE_CUDA_ARCHITECTURES=..., scripts/setup.sh's CGRAD_CUDA_ARCH, or the CUDAARCHS environment
# variable): used as is. Not given: chosen after enable_language below, and remembered, so that a later
# configure tells the value cgrad chose from one given since.
if((NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
   OR (DEFINED CACHE{cgrad_cuda_arch_chosen} AND "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "${cgrad_cuda_arch_chosen}"))
  set(cgrad_cuda_arch_given FALSE)
else()
  set(cgrad_cuda_arch_given TRUE)
endif()

# Machine code for each GPU visible at configure time (CMake's "native" detection), and PTX of the newest of
# them, which the driver compiles at load time for a GPU newer than any built for. A visible GPU this nvcc
# cannot compile for (newer than it) is left to that PTX, or to the newest PTX nvcc makes. No GPU visible (CI, a build machine): Hopper (H100/H200, the
# GPUs cgrad is tuned on), sm_90 code and compute_90 PTX. Sets <archs> and <why> (for the message).
function(cgrad_cuda_default_architectures archs why)
  set(visible ${CMAKE_CUDA_ARCHITECTURES_NATIVE}) # e.g. 90-real;120-real
  list(TRANSFORM visible REPLACE "-real$" "")
  list(REMOVE_DUPLICATES visible)
  if(NOT visible)
    set(${archs} "90-real;90-virtual" PARENT_SCOPE)
    set(${why} "no GPU visible at configure time: Hopper (sm_90) code, and its PTX for newer GPUs" PARENT_SCOPE)
    return()
  endif()
  # nvcc --list-gpu-arch: compute_75, compute_80, ... (the virtual architectures this nvcc compiles for)
  execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-arch OUTPUT_VARIABLE listed RESULT_VARIABLE rc ERROR_QUIET)
  string(REGEX MATCHALL "[0-9]+" supported "${listed}")
  set(real "")
  set(unsupported "")
  foreach(arch IN LISTS visible)
    if(rc EQUAL 0 AND NOT arch IN_LIST supported)
      list(APPEND unsupported sm_${arch})
    else()
      list(APPEND real ${arch})
    endif()
  endforeach()
  if(real)
    set(ptx_from ${real})
  else()
    set(ptx_from ${supported})
  endif()
  list(SORT ptx_from COMPARE NATURAL)
  list(GET ptx_from -1 ptx)
  list(TRANSFORM real APPEND "-real")
  set(${archs} ${real} ${ptx}-virtual PARENT_SCOPE)
  list(JOIN visible ", sm_" visible)
  set(text "the GPUs visible at configure time (sm_${visible}), and PTX for newer GPUs")
  if(unsupported)
    string(APPEND text "; ${unsupported}: not a target of this nvcc, left to the PTX")
  endif()
  set(${why} "${text}" PARENT_SCOPE)
endfunction()

# One CUDA runtime, the shared one: CUDA::cudart and cuBLAS use it, and CMake's default (static) would link
# a second copy of the runtime into the same binaries.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
message(STATUS "cgrad: CUDA: on, nvcc ${CMAKE_CUDA_COMPILER_VERSION} (${CMAKE_CUDA_COMPILER}); -DCGRAD_CUDA=OFF for a CPU-only build")

if(cgrad_cuda_arch_given)
  message(STATUS "cgrad: CUDA architectures: ${CMAKE_CUDA_ARCHITECTURES} (as given)")
else()
  cgrad_cuda_default_architectures(cgrad_archs cgrad_archs_why)
  set(CMAKE_CUDA_ARCHITECTURES "${cgrad_archs}" CACHE STRING "CUDA architectures" FORCE)
  set(cgrad_cuda_arch_chosen "${cgrad_archs}" CACHE INTERNAL "CMAKE_CUDA_ARCHITECTURES as cgrad chose it")
  message(STATUS "cgrad: CUDA architectures: ${cgrad_archs} (${cgrad_archs_why}); "
    "-DCMAKE_CUDA_ARCHITECTURES=... or CGRAD_CUDA_ARCH chooses others")
endif()

# ---- optional libraries --------------------------------------------------------------------------------
# Looks for <header> and lib<library> in the CUDA toolkit, then where CMake looks by default (the
# CMAKE_PREFIX_PATH and system prefixes, with their multiarch directories such as lib/<arch>); the paths
# found are cached as <VAR>_INCLUDE_DIR and <VAR>_LIBRARY, which may also be set by hand. Defines the option
# CGRAD_<VAR>, ON when found, and prints one line: what the library gives, or what is disabled without it
# and how to enable it. Absence is never an error, except when CGRAD_<VAR>=ON was asked for.
function(cgrad_optional_library var name header library gives without get)
  find_path(${var}_INCLUDE_DIR ${header} HINTS ${CUDAToolkit_INCLUDE_DIRS})
  find_library(${var}_LIBRARY ${library} HINTS ${CUDAToolkit_LIBRARY_DIR})
  if(${var}_INCLUDE_DIR AND ${var}_LIBRARY)
    set(found ON)
  else()
    set(found OFF)
  endif()
  option(CGRAD_${var} "${gives} through ${name} (default: ON when found)" ${found})
  set(paths "${${var}_INCLUDE_DIR}/${header}, ${${var}_LIBRARY}")
  if(CGRAD_${var} AND found)
    message(STATUS "cgrad: ${name}: on (${paths}): ${gives}")
  elseif(CGRAD_${var})
    message(FATAL_ERROR "CGRAD_${var} is ON but ${name} was not found (${header} and lib${library}, in the CUDA "
      "toolkit or the system's directories): install ${get}, or set ${var}_INCLUDE_DIR and ${var}_LIBRARY, "
      "or configure with -DCGRAD_${var}=OFF (then ${without}).")
  elseif(found)
    message(STATUS "cgrad: ${name}: off (CGRAD_${var}=OFF; found at ${paths}): ${without}; "
      "-DCGRAD_${var}=ON enables it")
  else()
    message(STATUS "cgrad: ${name}: not found, off: ${without}; to enable it, install ${get} "
      "or set ${var}_INCLUDE_DIR and ${var}_LIBRARY")
  endif()
endfunction()

cgrad_optional_library(CUDNN cuDNN cudnn.h cudnn "GPU convolutions (cg_conv2d)"
  "cg_conv2d on a GPU fails with an error saying so; max pooling still runs"
  "cuDNN 9 (Debian/Ubuntu: NVIDIA's libcudnn9-dev-cuda-13)")
cgrad_optional_library(NCCL NCCL nccl.h nccl "multi-GPU data parallelism (cg_data_parallel_new, cg_ddp_new on GPUs)"
  "data parallelism over several GPUs fails with an error saying so"
  "NCCL 2 (it ships with some CUDA toolkits; Debian/Ubuntu: NVIDIA's libnccl-dev)")

# cudnn-frontend: NVIDIA's header-only C++ API over cuDNN's graphs, which src/cuda/cuda_attention.cpp builds
# the fused attention with. scripts/fetch_cudnn_frontend.sh puts its headers in .deps/cudnn-frontend, searched
# first, so a frontend installed elsewhere (e.g. a pip one of another version) is used only without them. It
# also links the toolkit's NVRTC (some of its engines compile kernels at run time). Needs cuDNN: off without
# it, whatever was asked or cached. The option is ON by default when found.
find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h PATHS ${PROJECT_SOURCE_DIR}/.deps/cudnn-frontend/include
  NO_DEFAULT_PATH)
find_path(CUDNN_FRONTEND_INCLUDE_DIR cudnn_frontend.h)
if(NOT CUDNN_FRONTEND_INCLUDE_DIR)
  set(cgrad_frontend_missing "no cudnn_frontend.h: scripts/fetch_cudnn_frontend.sh fetches it")
elseif(NOT TARGET CUDA::nvrtc)
  set(cgrad_frontend_missing "no libnvrtc in the CUDA toolkit, which the frontend links")
else()
  set(cgrad_frontend_missing "")
endif()
if(cgrad_frontend_missing)
  set(cgrad_frontend_found OFF)
else()
  set(cgrad_frontend_found ON)
endif()
option(CGRAD_CUDNN_FRONTEND "Fused attention through cuDNN's C++ frontend (default: ON when found)"
  ${cgrad_frontend_found})
set(cgrad_frontend_without "attention composes its (L, S) scores")
if(NOT CGRAD_CUDNN)
  set(CGRAD_CUDNN_FRONTEND OFF)
  message(STATUS "cgrad: cuDNN frontend: off (needs cuDNN): ${cgrad_frontend_without}")
elseif(CGRAD_CUDNN_FRONTEND AND cgrad_frontend_found)
  message(STATUS "cgrad: cuDNN frontend: on (${CUDNN_FRONTEND_INCLUDE_DIR}): fused attention "
    "(cg_scaled_dot_product_attention, 16-bit on the GPU)")
elseif(CGRAD_CUDNN_FRONTEND)
  message(FATAL_ERROR "CGRAD_CUDNN_FRONTEND is ON but the frontend cannot be built (${cgrad_frontend_missing}). "
    "CUDNN_FRONTEND_INCLUDE_DIR may name the headers' directory; or configure with -DCGRAD_CUDNN_FRONTEND=OFF "
    "(then ${cgrad_frontend_without}).")
elseif(cgrad_frontend_found)
  message(STATUS "cgrad: cuDNN frontend: off (CGRAD_CUDNN_FRONTEND=OFF; found at ${CUDNN_FRONTEND_INCLUDE_DIR}): "
    "${cgrad_frontend_without}; -DCGRAD_CUDNN_FRONTEND=ON enables it")
else()
  message(STATUS "cgrad: cuDNN frontend: off (${cgrad_frontend_missing}): ${cgrad_frontend_without}")
endif()
if(CGRAD_CUDNN_FRONTEND)
  enable_language(CXX)
endif()

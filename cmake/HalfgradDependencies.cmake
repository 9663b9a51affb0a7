# Finds the project's dependencies once, so folder CMakeLists only link targets.

find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3 REQUIRED)  # safetensors headers (engine/safetensors.cpp)
find_package(ZLIB REQUIRED)  # gzip-compressed IDX files (data/idx.cpp: Fashion-MNIST)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)  # the rendezvous's HMAC-SHA256 (dist/job_secret.cpp)
if(HALFGRAD_BUILD_TESTS)
  find_package(doctest REQUIRED)
endif()

# Resolve an AUTO|ON|OFF option against whether the dependency was found.
function(halfgrad_resolve option found result)
  if(${option} STREQUAL "OFF")
    set(${result} OFF PARENT_SCOPE)
  elseif(${found})
    set(${result} ON PARENT_SCOPE)
  elseif(${option} STREQUAL "ON")
    message(FATAL_ERROR "${option} was requested but its dependency was not found")
  else()
    set(${result} OFF PARENT_SCOPE)
  endif()
endfunction()

# CUDA. HALFGRAD_CUDA_MODE is
#   NVCC      kernels/cuda/*.cu compiled by nvcc, linked with the CUDA runtime (AUTO/ON with a toolkit
#             whose nvcc works);
#   EMULATED  the same sources compiled as C++ and run by the SIMT emulator (kernels/emu); needs only
#             the toolkit's headers (cuda_fp16.h, cuda_bf16.h, vector_types.h, cuda_runtime_api.h);
#   OFF       no CUDA code at all (HALFGRAD_CUDA=OFF, or AUTO without a toolkit).
# HALFGRAD_CUDA_BACKEND is ON for NVCC and EMULATED; HALFGRAD_HAS_CUDA_TOOLKIT whether the toolkit's
# headers are known (the half tests compare against them).
set(HALFGRAD_CUDA_MODE OFF)
if(NOT HALFGRAD_CUDA MATCHES "^(AUTO|ON|OFF|EMULATED)$")
  message(FATAL_ERROR "HALFGRAD_CUDA=${HALFGRAD_CUDA}: expected AUTO, ON, OFF or EMULATED")
endif()
if(NOT HALFGRAD_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
endif()
if(HALFGRAD_CUDA STREQUAL "EMULATED")
  if(CUDAToolkit_FOUND)
    find_file(HALFGRAD_CUDA_FP16_HEADER cuda_fp16.h PATHS ${CUDAToolkit_INCLUDE_DIRS} NO_DEFAULT_PATH)
  endif()
  if(NOT CUDAToolkit_FOUND OR NOT HALFGRAD_CUDA_FP16_HEADER)
    message(FATAL_ERROR "HALFGRAD_CUDA=EMULATED compiles the CUDA kernels as C++ and needs the CUDA toolkit's "
                        "headers (cuda_fp16.h, cuda_bf16.h, vector_types.h, cuda_runtime_api.h), which were not "
                        "found: install the toolkit or point CUDAToolkit_ROOT at it")
  endif()
  set(HALFGRAD_CUDA_MODE EMULATED)
elseif(NOT HALFGRAD_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(CUDAToolkit_FOUND)
    check_language(CUDA)
  endif()
  if(CUDAToolkit_FOUND AND CMAKE_CUDA_COMPILER)
    set(HALFGRAD_CUDA_MODE NVCC)
  elseif(HALFGRAD_CUDA STREQUAL "ON")
    message(FATAL_ERROR "HALFGRAD_CUDA=ON but no working CUDA toolkit (nvcc and headers) was found: install it, "
                        "point CUDAToolkit_ROOT / CMAKE_CUDA_COMPILER at it, or use HALFGRAD_CUDA=AUTO|OFF|EMULATED")
  endif()
endif()
if(HALFGRAD_CUDA_MODE STREQUAL "OFF")
  set(HALFGRAD_CUDA_BACKEND OFF)
else()
  set(HALFGRAD_CUDA_BACKEND ON)
endif()
if(CUDAToolkit_FOUND)
  set(HALFGRAD_HAS_CUDA_TOOLKIT ON)
else()
  set(HALFGRAD_HAS_CUDA_TOOLKIT OFF)
endif()

# cuDNN (optional; nvcc builds only, the emulator cannot run it): convolutions go through it when
# found (kernels/cuda/cudnn/conv2d_cudnn.cpp), through im2col + GEMM otherwise. HALFGRAD_CUDNN=AUTO|ON|OFF.
set(HALFGRAD_CUDNN AUTO CACHE STRING "cuDNN for convolutions in nvcc builds: AUTO, ON or OFF")
set(HALFGRAD_HAS_CUDNN OFF)
if(HALFGRAD_CUDA_MODE STREQUAL "NVCC" AND NOT HALFGRAD_CUDNN STREQUAL "OFF")
  find_path(HALFGRAD_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV CUDNN_ROOT PATH_SUFFIXES include)
  find_library(HALFGRAD_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} ENV CUDNN_ROOT PATH_SUFFIXES lib64 lib)
  if(HALFGRAD_CUDNN_INCLUDE_DIR AND HALFGRAD_CUDNN_LIBRARY)
    set(HALFGRAD_HAS_CUDNN ON)
  elseif(HALFGRAD_CUDNN STREQUAL "ON")
    message(FATAL_ERROR "HALFGRAD_CUDNN=ON but cudnn.h / libcudnn were not found: set CUDNN_ROOT or use AUTO|OFF")
  endif()
endif()

if(NOT HALFGRAD_MPI STREQUAL "OFF")
  find_package(MPI QUIET COMPONENTS CXX)
endif()
halfgrad_resolve(${HALFGRAD_MPI} MPI_FOUND HALFGRAD_HAS_MPI)

# NCCL, for collectives on real CUDA devices (dist/nccl_transport.cpp): only in the nvcc build, found
# next to the CUDA toolkit (or NCCL_ROOT). Without it dist/ builds its stub (no_nccl.cpp).
set(HALFGRAD_HAS_NCCL OFF)
if(HALFGRAD_CUDA_MODE STREQUAL "NVCC")
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl HINTS ${NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    add_library(NCCL::NCCL UNKNOWN IMPORTED)
    set_target_properties(NCCL::NCCL PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                                                INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
    set(HALFGRAD_HAS_NCCL ON)
  endif()
endif()

# How ctest launches the multi-process dist/ suites: mpirun with more ranks than cores allowed
# (--oversubscribe) and, where CI runs as root, --allow-run-as-root.
if(HALFGRAD_HAS_MPI)
  set(HALFGRAD_MPIEXEC_FLAGS --oversubscribe --allow-run-as-root CACHE STRING "Flags for mpirun in the dist/ tests")
endif()

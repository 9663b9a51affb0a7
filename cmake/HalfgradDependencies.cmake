# Finds the project's dependencies once, so folder CMakeLists only link targets.

find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(OpenMP REQUIRED COMPONENTS CXX)
find_package(Threads REQUIRED)
find_package(nlohmann_json 3 REQUIRED)  # safetensors headers (engine/safetensors.cpp)
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

# CUDA: the toolkit is wired from the start; the backend that uses it arrives with kernels/cuda.
if(NOT HALFGRAD_CUDA STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
endif()
halfgrad_resolve(${HALFGRAD_CUDA} CUDAToolkit_FOUND HALFGRAD_HAS_CUDA_TOOLKIT)

if(NOT HALFGRAD_MPI STREQUAL "OFF")
  find_package(MPI QUIET COMPONENTS CXX)
endif()
halfgrad_resolve(${HALFGRAD_MPI} MPI_FOUND HALFGRAD_HAS_MPI)

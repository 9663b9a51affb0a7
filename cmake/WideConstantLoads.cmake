# Guards against a GCC 12.2 wrong-code bug with AVX-512 targets (cmake/probes/wide_constant_loads.cpp
# says what it does): the probe is compiled with the project's optimisation and CPU flags and run; when
# it reads back wrong values, the loads and stores the compiler may merge are limited to 128 bits
# (-mmove-max=128 -mstore-max=128: memcpy and store merging only; the vectorised loops and the intrinsics
# kernels keep their width), and the probe must then read right or configuration stops.
# Sets HALFGRAD_WIDE_LOAD_FLAGS (empty when the compiler is sound).
set(HALFGRAD_WIDE_LOAD_FLAGS "")
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND NOT CMAKE_CROSSCOMPILING)
  set(_probe ${CMAKE_CURRENT_LIST_DIR}/probes/wide_constant_loads.cpp)
  set(_expected "2 2 0 0 | 5 5 0 0 | 1 1 0 0 | 1 1 1 0 0 0 0 0 | 0 0 3 3 | 7 7 7 0 0 0 0 0 | 1 1 1 1 1 0 0 0 | 4 4 4 4 4 4 4 4 0 0 0 0 0 0 0 0 | 2 2 0 0 1 1 1 1 0 0 0 0 3 3 0 0")
  set(_cpu_flags "")
  if(HALFGRAD_NATIVE)
    set(_cpu_flags -march=native)
  endif()
  function(_halfgrad_probe_wide_loads result extra)
    try_run(_run _compiled ${CMAKE_BINARY_DIR}/wide_constant_loads_probe ${_probe}
            COMPILE_DEFINITIONS -O3 ${_cpu_flags} ${extra}
            CXX_STANDARD 20
            RUN_OUTPUT_VARIABLE _output)
    string(STRIP "${_output}" _output)
    string(STRIP "${_expected}" _want)
    if(NOT _compiled OR NOT _run EQUAL 0)
      set(${result} "unbuilt" PARENT_SCOPE)
    elseif(_output STREQUAL _want)
      set(${result} "sound" PARENT_SCOPE)
    else()
      set(${result} "${_output}" PARENT_SCOPE)
    endif()
  endfunction()
  _halfgrad_probe_wide_loads(_plain "")
  if(NOT _plain STREQUAL "sound" AND NOT _plain STREQUAL "unbuilt")
    set(_workaround -mmove-max=128 -mstore-max=128)
    _halfgrad_probe_wide_loads(_fixed "${_workaround}")
    if(NOT _fixed STREQUAL "sound")
      message(FATAL_ERROR "${CMAKE_CXX_COMPILER} ${CMAKE_CXX_COMPILER_VERSION} miscompiles constant arrays with "
                          "-O3 ${_cpu_flags} (cmake/probes/wide_constant_loads.cpp read back '${_plain}'), and "
                          "${_workaround} does not avoid it ('${_fixed}'). Configure with -DHALFGRAD_NATIVE=OFF or "
                          "another compiler.")
    endif()
    string(JOIN " " _shown ${_workaround})
    message(STATUS "GCC ${CMAKE_CXX_COMPILER_VERSION} with ${_cpu_flags} folds wide loads of constant arrays wrongly "
                   "(probe read '${_plain}'): compiling with ${_shown}")
    set(HALFGRAD_WIDE_LOAD_FLAGS ${_workaround})
  endif()
endif()

# Resource usage of the sm_90 build and theoretical occupancy (docs/kernel_audit.md, "Resource usage and
# occupancy"). Included from audit/CMakeLists.txt.
target_sources(hg_audit PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/resource_usage.cpp ${CMAKE_CURRENT_SOURCE_DIR}/occupancy.cpp)

# kernel_resources: one JSON line per kernel (registers, shared memory, stack, spills; occupancy at a
# block size given with --block). `kernel_resources --help`.
add_executable(kernel_resources ${CMAKE_CURRENT_SOURCE_DIR}/kernel_resources_main.cpp)
target_link_libraries(kernel_resources PRIVATE hg_audit halfgrad_flags)

# The nvcc build only: every .cu of hg_kernels_cuda is compiled with ptxas -v, and its report is kept per
# object (OBJ.ptxas) by the launcher capture_ptxas.sh (before ccache, which replays the report on a hit).
# ptxas -v is the one source that states spill stores and loads: cuobjdump --dump-resource-usage gives a
# STACK figure that mixes local arrays with spills. After hg_kernels_cuda is built, kernel_resources
# gathers the reports into ${CMAKE_BINARY_DIR}/kernel_resources.txt (part of `all`; it fails when a .cu
# object has no report).
set(HALFGRAD_KERNEL_RESOURCES_FILE "")
if(HALFGRAD_CUDA_MODE STREQUAL "NVCC" AND TARGET hg_kernels_cuda)
  set(HALFGRAD_KERNEL_RESOURCES_FILE ${CMAKE_BINARY_DIR}/kernel_resources.txt)
  target_compile_definitions(kernel_resources PRIVATE HG_KERNEL_RESOURCES_FILE="${HALFGRAD_KERNEL_RESOURCES_FILE}")
  target_compile_options(hg_kernels_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
  set_property(TARGET hg_kernels_cuda PROPERTY CUDA_COMPILER_LAUNCHER
               ${CMAKE_CURRENT_SOURCE_DIR}/capture_ptxas.sh ${CMAKE_CUDA_COMPILER_LAUNCHER})
  add_custom_command(OUTPUT ${HALFGRAD_KERNEL_RESOURCES_FILE}
                     COMMAND kernel_resources --gather ${HALFGRAD_KERNEL_RESOURCES_FILE} $<TARGET_OBJECTS:hg_kernels_cuda>
                     DEPENDS hg_kernels_cuda kernel_resources $<TARGET_OBJECTS:hg_kernels_cuda>
                     COMMAND_EXPAND_LISTS
                     COMMENT "Gathering ptxas resource usage of hg_kernels_cuda into kernel_resources.txt")
  add_custom_target(kernel_resources_file ALL DEPENDS ${HALFGRAD_KERNEL_RESOURCES_FILE})
endif()
set(HALFGRAD_KERNEL_RESOURCES_FILE "${HALFGRAD_KERNEL_RESOURCES_FILE}" PARENT_SCOPE)

# cmake --install puts headers, static libraries and a package config under the prefix, so another
# project can do: find_package(halfgrad) + target_link_libraries(app halfgrad::halfgrad).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# One umbrella target for users.
add_library(halfgrad INTERFACE)
target_link_libraries(halfgrad INTERFACE hg_kernels hg_engine hg_layers hg_optim hg_train hg_data hg_dist hg_metrics hg_plan hg_text)
add_library(halfgrad::halfgrad ALIAS halfgrad)

# The installed headers are C++20 (e.g. the defaulted operator== of engine/device.h), so every exported
# target requires C++20 of its users: a consumer that sets no standard itself still compiles them. No
# public header includes a dependency's header (Eigen, nlohmann json, omp.h, MPI and NCCL stay in .cpp
# files); only the kernel-internal kernels/cuda/ and kernels/emu/ headers include the CUDA headers, whose
# directories come with CUDA::cudart (nvcc build) or hg_emu (emulated build). halfgradConfig.cmake finds
# the dependencies that the static libraries link.
target_compile_features(halfgrad INTERFACE cxx_std_20)
foreach(target hg_kernels hg_engine hg_layers hg_optim hg_train hg_data hg_dist hg_metrics hg_plan hg_text ${HALFGRAD_CUDA_EXPORTED_TARGETS})
  target_include_directories(${target} PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/halfgrad>)
  target_compile_features(${target} PUBLIC cxx_std_20)
endforeach()

install(TARGETS halfgrad hg_kernels hg_engine hg_layers hg_optim hg_train hg_data hg_dist hg_metrics hg_plan hg_text halfgrad_flags ${HALFGRAD_CUDA_EXPORTED_TARGETS}
        EXPORT halfgradTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(folder kernels engine layers optim train data dist metrics plan text)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${folder}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/halfgrad/${folder}
          FILES_MATCHING PATTERN "*.h")
endforeach()

set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/halfgrad)
install(EXPORT halfgradTargets NAMESPACE halfgrad:: DESTINATION ${config_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/halfgradConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/halfgradConfig.cmake INSTALL_DESTINATION ${config_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/halfgradConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/halfgradConfig.cmake ${PROJECT_BINARY_DIR}/halfgradConfigVersion.cmake
        DESTINATION ${config_dir})

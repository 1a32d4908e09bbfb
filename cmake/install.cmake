# cmake --install: the public headers (include/mk), the static libraries, the mk CLI and a package
# config, so that find_package(mk) + target_link_libraries(app mk::mk) works against the prefix.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MK_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/mk)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mk DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# mk::mk is the API; the layer libraries come along because static archives need their dependencies.
set(mk_installed_libraries mk_api mk_backend mk_cuda_host mk_cuda_emu mk_emu mk_runtime mk_scheduler mk_instructions mk_models mk_flags
                           mk_fmt mk_pcre2)
if(MK_HAVE_CUDA)
  list(APPEND mk_installed_libraries mk_cuda)  # the CUDA backends; consumers need the CUDA toolkit's cudart_static
endif()
install(TARGETS ${mk_installed_libraries} EXPORT mkTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS mk RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT mkTargets NAMESPACE mk:: DESTINATION ${MK_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/mkConfig.cmake.in ${PROJECT_BINARY_DIR}/mkConfig.cmake
                              INSTALL_DESTINATION ${MK_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mkConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/mkConfig.cmake ${PROJECT_BINARY_DIR}/mkConfigVersion.cmake
        DESTINATION ${MK_INSTALL_CMAKEDIR})

# `make install` (cmake --install): the ferry CLI, libferry.so, the C/C++ headers and a CMake
# package, so a project does
#     find_package(ferry REQUIRED)
#     target_link_libraries(app PRIVATE ferry::ferry)
# (tests/compile/consumer is such a project; the ctest `install_package_consumer` builds it).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(FERRY_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ferry)

install(TARGETS ferry RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ferry_shared EXPORT ferryTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES include/ferry/ferry.h include/ferry/ferry.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ferry)
install(EXPORT ferryTargets NAMESPACE ferry:: DESTINATION ${FERRY_INSTALL_CMAKEDIR})

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ferryConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/ferryConfig.cmake
                              INSTALL_DESTINATION ${FERRY_INSTALL_CMAKEDIR}
                              PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ferryConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ferryConfig.cmake ${CMAKE_BINARY_DIR}/ferryConfigVersion.cmake
        DESTINATION ${FERRY_INSTALL_CMAKEDIR})

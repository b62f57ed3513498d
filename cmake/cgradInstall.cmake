# Install rules (included at the end of CMakeLists.txt): the public headers, libcgrad.so (versioned,
# with a SONAME) and libcgrad.a, a CMake package (find_package(cgrad) -> cgrad::cgrad and
# cgrad::cgrad_static) and a pkg-config file. Tests, examples and benchmarks are not installed.
#
# Nothing installed names a path of the build machine's source or build tree: the package config
# finds the static library's dependencies again on the consumer's machine (find_dependency for
# CMake packages, find_library by name for plain libraries), and cgrad.pc locates itself.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# libcgrad.so.0 -> libcgrad.so.0.1.0. The installed library keeps the run paths of the libraries it
# links from directories the loader does not search by itself (e.g. OpenMPI's private one).
set_target_properties(cgrad PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}
  INSTALL_RPATH_USE_LINK_PATH ON)

# ---- what a consumer of libcgrad.a links besides it ------------------------------------------------
# libcgrad.so needs none of this at link time: it names its own dependencies. For each entry of
# cgrad_deps (CMakeLists.txt) this collects: the link item exported for cgrad::cgrad_static, the
# find_dependency() call or library name the package config needs for it, and its pkg-config flags.
set(cgrad_export_links "")
set(cgrad_config_packages "")
set(cgrad_config_libraries "")
set(cgrad_pc_libs_private "")

# -L<dir> -l<name> for library files (no -L for the compiler's own directories).
function(cgrad__pc_flags out)
  set(flags "")
  foreach(file IN LISTS ARGN)
    get_filename_component(dir "${file}" DIRECTORY)
    get_filename_component(name "${file}" NAME_WE)
    string(REGEX REPLACE "^lib" "" name "${name}")
    if(NOT dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
      list(APPEND flags "-L${dir}")
    endif()
    list(APPEND flags "-l${name}")
  endforeach()
  set(${out} ${flags} PARENT_SCOPE)
endfunction()

foreach(dep IN LISTS cgrad_deps)
  set(package "")
  if(dep STREQUAL "OpenMP::OpenMP_C")
    set(package "OpenMP COMPONENTS C")
    set(flags ${OpenMP_C_FLAGS})
  elseif(dep STREQUAL "ZLIB::ZLIB")
    set(package "ZLIB")
    cgrad__pc_flags(flags ${ZLIB_LIBRARIES})
  elseif(dep STREQUAL "MPI::MPI_C")
    set(package "MPI COMPONENTS C")
    cgrad__pc_flags(flags ${MPI_C_LIBRARIES})
  elseif(dep MATCHES "^CUDA::")
    set(package "CUDAToolkit")
    get_target_property(location ${dep} IMPORTED_LOCATION)
    cgrad__pc_flags(flags "${location}")
  elseif(IS_ABSOLUTE "${dep}")
    # A library found by find_library: the package config looks it up again by name and exports
    # it as cgrad::dep_<name>.
    get_filename_component(name "${dep}" NAME_WE)
    string(REGEX REPLACE "^lib" "" name "${name}")
    list(APPEND cgrad_config_libraries ${name})
    list(APPEND cgrad_export_links cgrad::dep_${name})
    cgrad__pc_flags(flags "${dep}")
  else()
    message(FATAL_ERROR "cmake/cgradInstall.cmake: cgrad links ${dep}; say how consumers of the installed "
      "static library find it (a CMake package or a library file)")
  endif()
  if(package)
    list(APPEND cgrad_export_links ${dep})
    if(NOT package IN_LIST cgrad_config_packages)
      list(APPEND cgrad_config_packages "${package}")
    endif()
  endif()
  list(APPEND cgrad_pc_libs_private ${flags})
endforeach()
# nvcc compiles the kernels' host code as C++: a C program linking libcgrad.a also needs the C++
# runtime libraries (libstdc++) that linking with the CUDA compiler adds.
if(CGRAD_CUDA)
  set(cgrad_cxx_libs ${CMAKE_CUDA_IMPLICIT_LINK_LIBRARIES})
  list(REMOVE_ITEM cgrad_cxx_libs ${CMAKE_C_IMPLICIT_LINK_LIBRARIES})
  list(REMOVE_DUPLICATES cgrad_cxx_libs)
  list(APPEND cgrad_export_links ${cgrad_cxx_libs})
  list(TRANSFORM cgrad_cxx_libs PREPEND -l)
  list(APPEND cgrad_pc_libs_private ${cgrad_cxx_libs})
endif()
target_link_libraries(cgrad_static INTERFACE "$<INSTALL_INTERFACE:${cgrad_export_links}>")

# ---- headers, libraries, CMake package ----------------------------------------------------------------
install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(TARGETS cgrad cgrad_static EXPORT cgradTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(cgrad_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/cgrad)
install(EXPORT cgradTargets NAMESPACE cgrad:: DESTINATION ${cgrad_cmake_dir})
set(cgrad_config_find_dependencies "")
foreach(package IN LISTS cgrad_config_packages)
  string(APPEND cgrad_config_find_dependencies "find_dependency(${package})\n")
endforeach()
configure_package_config_file(cmake/cgradConfig.cmake.in ${PROJECT_BINARY_DIR}/cgradConfig.cmake
  INSTALL_DESTINATION ${cgrad_cmake_dir})
# 0.x releases: a consumer asking for 0.1 accepts any 0.y >= 0.1, as the SONAME (libcgrad.so.0) does.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/cgradConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/cgradConfig.cmake ${PROJECT_BINARY_DIR}/cgradConfigVersion.cmake
  DESTINATION ${cgrad_cmake_dir})

# ---- pkg-config -------------------------------------------------------------------------------------------
# cgrad.pc finds the prefix from its own directory (${pcfiledir}), so the tree can be installed
# anywhere with `cmake --install --prefix` and moved afterwards.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  message(FATAL_ERROR "cmake/cgradInstall.cmake: CMAKE_INSTALL_LIBDIR must be relative to the prefix")
endif()
file(RELATIVE_PATH cgrad_pc_to_prefix /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" cgrad_pc_to_prefix "${cgrad_pc_to_prefix}")
list(REMOVE_DUPLICATES cgrad_pc_libs_private)
list(JOIN cgrad_pc_libs_private " " cgrad_pc_libs_private)
configure_file(cmake/cgrad.pc.in ${PROJECT_BINARY_DIR}/cgrad.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/cgrad.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# trident::trident: every module in one target. With TRIDENT_INSTALL (the default when trident is the
# top-level project), trident is also installed as a library (docs/architecture.md, "Using trident as a library"):
#   lib/libtrident_<module>.a        one static library per module (trident_module)
#   include/trident/<module>/*.h     the headers, as the build tree has them under src/
#   bin/trident                      the command
#   lib/cmake/trident/               trident-config.cmake: find_package(trident CONFIG [COMPONENTS ...])
#                                    gives trident::trident (every module) and trident::<module>
#   lib/pkgconfig/trident.pc         the same for Makefiles: pkg-config --static --cflags --libs trident
# The package finds trident's dependencies again (cmake/trident-config.cmake.in) and names the optional
# parts this build has as components: cuda, nccl, parquet.
include(CMakePackageConfigHelpers)

get_property(trident_modules GLOBAL PROPERTY TRIDENT_MODULES)
set(trident_module_targets)
foreach(m IN LISTS trident_modules)
  list(APPEND trident_module_targets trident_${m})
endforeach()

# trident::trident: every module. The name trident is the command's, so the target is trident_library.
add_library(trident_library INTERFACE)
set_target_properties(trident_library PROPERTIES EXPORT_NAME trident)
target_link_libraries(trident_library INTERFACE ${trident_module_targets})
add_library(trident::trident ALIAS trident_library)
if(NOT TRIDENT_INSTALL)  # added with add_subdirectory: the targets, no install rules
  return()
endif()

get_property(trident_extra_targets GLOBAL PROPERTY TRIDENT_EXTRA_TARGETS)  # libraries the modules link
install(TARGETS ${trident_module_targets} ${trident_extra_targets} trident_library EXPORT trident-targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# The installed command keeps the run-time path to libraries outside the system's (pyarrow's Arrow).
set_target_properties(trident PROPERTIES INSTALL_RPATH_USE_LINK_PATH TRUE)
install(TARGETS trident RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/trident DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(EXPORT trident-targets NAMESPACE trident:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/trident)

# What the config file needs to find the dependencies again. A module whose libraries need a package the
# list in trident-config.cmake.in lacks adds its find_dependency() line to the global property
# TRIDENT_PACKAGE_DEPENDENCIES (and its link flags to TRIDENT_PC_LIBS; a helper library of its own that
# it links goes in TRIDENT_EXTRA_TARGETS), e.g.
#   set_property(GLOBAL APPEND PROPERTY TRIDENT_PACKAGE_DEPENDENCIES "find_dependency(Protobuf)")
set(TRIDENT_PACKAGE_COMPONENTS "")
foreach(part CUDA NCCL PARQUET)
  if(TRIDENT_${part})
    string(TOLOWER ${part} lower)
    list(APPEND TRIDENT_PACKAGE_COMPONENTS ${lower})
  endif()
endforeach()
set(TRIDENT_PACKAGE_PYARROW_ARROW "")
set(TRIDENT_PACKAGE_PYARROW_PARQUET "")
set(TRIDENT_PACKAGE_PYARROW_INCLUDE "")
if(TRIDENT_PARQUET)
  get_target_property(TRIDENT_PACKAGE_PYARROW_ARROW trident_pyarrow::arrow IMPORTED_LOCATION)
  get_target_property(TRIDENT_PACKAGE_PYARROW_PARQUET trident_pyarrow::parquet IMPORTED_LOCATION)
  get_target_property(TRIDENT_PACKAGE_PYARROW_INCLUDE trident_pyarrow::arrow INTERFACE_INCLUDE_DIRECTORIES)
endif()
get_property(trident_extra_deps GLOBAL PROPERTY TRIDENT_PACKAGE_DEPENDENCIES)
list(JOIN trident_extra_deps "\n" TRIDENT_PACKAGE_EXTRA_DEPENDENCIES)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/trident-config.cmake.in
                              ${PROJECT_BINARY_DIR}/package/trident-config.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/trident)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/package/trident-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/package/trident-config.cmake
              ${PROJECT_BINARY_DIR}/package/trident-config-version.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/trident)

# pkg-config: the static libraries in link order (a module before the modules it uses), then what they need.
set(trident_link_order plot train parallel_zero parallel_pipeline parallel_data optim models checkpoint nn parallel_context parallel_tensor
    dist autograd ops kernels_cuda kernels_cpu data core)
set(TRIDENT_PC_LIBS "")
foreach(m IN LISTS trident_link_order)
  if(m IN_LIST trident_modules)
    string(APPEND TRIDENT_PC_LIBS " -ltrident_${m}")
  endif()
endforeach()
set(TRIDENT_PC_REQUIRES "fmt tomlplusplus openblas libpcre2-8 icu-uc libxxhash libzstd libzip cairo ${TRIDENT_MPI_PC_MODULE}")
# The prefix relative to the .pc file, so the installed tree can move (and `cmake --install --prefix` works).
file(RELATIVE_PATH TRIDENT_PC_UP "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
set(TRIDENT_PC_LIBS_PRIVATE "-ldnnl -fopenmp")
if(TRIDENT_NCCL)
  string(APPEND TRIDENT_PC_LIBS_PRIVATE " ${NCCL_LIBRARY}")
endif()
if(TRIDENT_CUDA)
  string(APPEND TRIDENT_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcublasLt -lcudart")
endif()
if(TRIDENT_PARQUET)
  # pyarrow's libraries are outside the loader's search path: the program keeps their directory as its
  # run-time path, as CMake gives the package's users (and the command) on its own.
  get_filename_component(trident_pyarrow_dir "${TRIDENT_PACKAGE_PYARROW_ARROW}" DIRECTORY)
  string(APPEND TRIDENT_PC_LIBS_PRIVATE
         " ${TRIDENT_PACKAGE_PYARROW_PARQUET} ${TRIDENT_PACKAGE_PYARROW_ARROW} -Wl,-rpath,${trident_pyarrow_dir}")
endif()
get_property(trident_pc_extra GLOBAL PROPERTY TRIDENT_PC_LIBS)
foreach(extra IN LISTS trident_pc_extra)
  string(APPEND TRIDENT_PC_LIBS_PRIVATE " ${extra}")
endforeach()
configure_file(${PROJECT_SOURCE_DIR}/cmake/trident.pc.in ${PROJECT_BINARY_DIR}/package/trident.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/package/trident.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# The MPI library trident builds against, and how its tests start ranks (docs/guide/distributed.md, "MPI
# libraries").
#
#   -DTRIDENT_MPI=openmpi | mpich    Debian's Open MPI (libopenmpi-dev) or MPICH (libmpich-dev), found
#                                    through their compiler wrappers mpicc.openmpi / mpicc.mpich;
#   empty (the default)              whatever `mpicc` is: the system's default (Debian: Open MPI, when
#                                    both are installed), or the one a cluster's `module load` puts first
#                                    on PATH. -DMPI_C_COMPILER=/path/to/mpicc picks any other MPI-3 library.
#
# Sets, from the library found (its MPI_Get_library_version):
#   TRIDENT_MPI_FAMILY     open_mpi, or mpich (MPICH and the libraries derived from it: Intel MPI,
#                          MVAPICH, Cray MPICH), whose launcher is Hydra's mpiexec
#   TRIDENT_MPIEXEC        the launcher the tests run ranks with, beside the library's compiler wrapper
#   TRIDENT_MPIEXEC_FLAGS  what the tests add: Open MPI needs to be told to run as root, to oversubscribe
#                          the cores and to yield when idle; Hydra does all of that by default
#   TRIDENT_MPI_PC_MODULE  the library's pkg-config module (trident.pc's Requires.private)
#   TRIDENT_SRUN_MPI       srun's --mpi plugin for this library: pmix (Open MPI), pmi2 (MPICH's PMI)
set(TRIDENT_MPI "" CACHE STRING "MPI library to build against: openmpi, mpich, or empty for the system's mpicc")
set_property(CACHE TRIDENT_MPI PROPERTY STRINGS "" openmpi mpich)
if(TRIDENT_MPI)
  if(NOT TRIDENT_MPI MATCHES "^(openmpi|mpich)$")
    message(FATAL_ERROR "TRIDENT_MPI='${TRIDENT_MPI}': expected openmpi, mpich, or empty (the system's mpicc); "
                        "for another MPI library give -DMPI_C_COMPILER=/path/to/its/mpicc")
  endif()
  set(trident_mpi_debian_package_openmpi libopenmpi-dev)
  set(trident_mpi_debian_package_mpich libmpich-dev)
  find_program(trident_mpicc NAMES mpicc.${TRIDENT_MPI} NO_CACHE)
  if(NOT trident_mpicc)
    message(FATAL_ERROR "TRIDENT_MPI=${TRIDENT_MPI}: no mpicc.${TRIDENT_MPI} on PATH "
                        "(install Debian's ${trident_mpi_debian_package_${TRIDENT_MPI}})")
  endif()
  set(MPI_C_COMPILER ${trident_mpicc} CACHE FILEPATH "MPI C compiler wrapper (from TRIDENT_MPI)" FORCE)
endif()
set(MPI_DETERMINE_LIBRARY_VERSION TRUE)
find_package(MPI REQUIRED COMPONENTS C)

if(MPI_C_LIBRARY_VERSION_STRING MATCHES "Open MPI")
  set(TRIDENT_MPI_FAMILY open_mpi)
  set(trident_mpiexec_names mpirun.openmpi mpirun mpiexec)
  set(TRIDENT_MPIEXEC_FLAGS --oversubscribe --allow-run-as-root --bind-to none -x OMPI_MCA_mpi_yield_when_idle=1)
  set(TRIDENT_MPI_PC_MODULE ompi-c)
  set(TRIDENT_SRUN_MPI pmix)
else()
  set(TRIDENT_MPI_FAMILY mpich)
  set(trident_mpiexec_names mpiexec.hydra mpiexec.mpich mpiexec)
  set(TRIDENT_MPIEXEC_FLAGS "")
  set(TRIDENT_MPI_PC_MODULE mpich)
  set(TRIDENT_SRUN_MPI pmi2)
endif()
# The C++ wrapper beside it, for the CMake package's consumers that enable CXX alone (trident-config.cmake).
get_filename_component(trident_mpicc_name "${MPI_C_COMPILER}" NAME)
string(REPLACE "mpicc" "mpicxx" trident_mpicxx_name "${trident_mpicc_name}")
get_filename_component(trident_mpi_bin "${MPI_C_COMPILER}" DIRECTORY)
set(TRIDENT_MPICXX "${trident_mpi_bin}/${trident_mpicxx_name}")
# The launcher that belongs to the library: next to its compiler wrapper first (`mpirun` alone may be
# another library's, as Debian's alternatives point it at one of the installed ones).
find_program(TRIDENT_MPIEXEC NAMES ${trident_mpiexec_names} HINTS ${trident_mpi_bin} NO_CACHE REQUIRED)
string(REGEX REPLACE "[,\n].*" "" trident_mpi_version "${MPI_C_LIBRARY_VERSION_STRING}")
message(STATUS "MPI: ${trident_mpi_version} (${TRIDENT_MPI_FAMILY}); tests launch with ${TRIDENT_MPIEXEC}")

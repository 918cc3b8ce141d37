// trident._trident: the module, its version and the distributed runtime's view (trident.dist).
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "trident/core/version.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/dist/self_communicator.h"

namespace trident::python {

namespace {
std::shared_ptr<dist::Communicator>& world_slot() {
  static std::shared_ptr<dist::Communicator> world;
  return world;
}
}  // namespace

std::shared_ptr<dist::Communicator> job_world() {
  auto& world = world_slot();
  if (!world) world = dist::job_world();
  return world;
}

}  // namespace trident::python

NB_MODULE(_trident, m) {
  namespace nb = nanobind;
  using namespace trident::python;
  m.def("version", [] { return std::string(trident::kVersion); }, "trident's version (the package's __version__)");
  bind_errors(m);
  bind_config(m);
  bind_model(m);
  bind_tokenizer(m);
  bind_data(m);

  // trident.dist (python/trident/dist.py) names these.
  nb::module_& d = m;
  d.def("dist_rank", [] { return job_world()->rank(); }, "This process's rank in the job (0 alone)");
  d.def("dist_world_size", [] { return job_world()->size(); }, "The job's process count (1 alone)");
  d.def("dist_launched_by_mpi", &trident::dist::launched_by_mpi,
        "Whether mpirun, srun or trident launch started this process as a rank of a job");
  d.def(
      "dist_barrier",
      [] {
        nb::gil_scoped_release unlocked;
        job_world()->barrier();
      },
      "Waits until every rank of the job calls it (collective)");
  d.def(
      "dist_abort", [](int exit_code) { trident::dist::abort_job(exit_code); }, nb::arg("exit_code"),
      "Ends the whole job now (MPI_Abort): a rank that fails alone brings its peers down instead of leaving "
      "them in a collective");
  d.def(
      "dist_finalize",
      [] {
        world_slot().reset();
        trident::dist::finalize();
      },
      "Ends the distributed runtime (MPI_Finalize); the package calls it at exit");
}

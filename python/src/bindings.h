// trident's Python extension (trident._trident): one nanobind module whose parts are bound in the files
// beside this one. Every call goes into the library functions the `trident` command uses; the Python
// package (python/trident/) adds only the idiomatic surface (docs/guide/python.md).
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <string>

#include "trident/dist/communicator.h"

namespace trident::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);     // errors.cpp: trident.Error and its kinds, from trident::Error
void bind_config(nb::module_& m);     // config.cpp: the configuration and the trainer
void bind_model(nb::module_& m);      // model.cpp: ParallelModel, its parameters as arrays, AdamW
void bind_tokenizer(nb::module_& m);  // tokenizer.cpp
void bind_data(nb::module_& m);       // data.cpp: preprocess, datasets from Python

// A dict of str keys, typed so in the stubs (dict[str, Any]).
using Dict = nb::typed<nb::dict, nb::str, nb::any>;

// Raises trident.DataError with `message` (an array or value handed in from Python). With the GIL held.
[[noreturn]] void raise_data_error(const std::string& message);

// The job's communicator: MPI's world when launched by mpirun, srun or trident launch, else one process.
// Made on first use and kept for the interpreter's life (MPI is finalized at exit).
std::shared_ptr<dist::Communicator> job_world();

}  // namespace trident::python

// trident's public API in one include: what a program needs to build, parallelise, train and save a model
// with the library rather than the `trident` command (which is built on the same headers).
//
// Installed as include/trident/trident.h; link trident::trident (CMake: find_package(trident CONFIG)) or
// `pkg-config --static --cflags --libs trident`. The pieces, module by module (docs/architecture.md):
//   core        Tensor (shape, dtype, device; shared storage, views), CounterRng, trident::Error
//   autograd    Variable and the differentiable functions (autograd::matmul, gelu, cross_entropy, ...)
//   nn          Module, Parameter; Linear and its column/row-parallel forms, Embedding, norms, MoE,
//               transformer blocks
//   optim       the optimizer registry (AdamW, SGD), the learning-rate schedules, the fp16 loss scaler
//   dist        Communicator (MPI on CPUs, NCCL on GPUs), the rank layout (Mesh)
//   parallel    data parallelism (GradSync), ZeRO 1-3 (ZeroOptimizer), tensor-parallel mappings,
//               pipeline schedules
//   models      the family registry and TransformerLM; Hugging Face configs and weights; from_pretrained and
//               save_pretrained under any layout, merged or sharded (models/pretrained.h)
//   checkpoint  safetensors files and sharded checkpoints that load under any layout; PyTorch's
//               pytorch_model.bin (read only, by an allow-list unpickler)
//   data        tokenizers, preprocessing into Megatron's indexed format, GPT samples, blending, loaders
//   train       ParallelModel (a model over a layout, stepped by the program's own loop), the groups of
//               a layout (make_groups), the configuration and the trainer the command runs
// Which ranks must call what: every function that takes a Communicator (or a group of one) is
// collective over that group: each of its ranks calls it, in the same order.
#pragma once

#include "trident/autograd/autograd.h"
#include "trident/checkpoint/safetensors.h"
#include "trident/checkpoint/sharded.h"
#include "trident/checkpoint/torch_file.h"
#include "trident/core/core.h"
#include "trident/data/data.h"
#include "trident/dist/communicator.h"
#include "trident/dist/mesh.h"
#include "trident/dist/mpi_communicator.h"
#include "trident/dist/self_communicator.h"
#include "trident/models/transformer_lm.h"
#include "trident/models/family.h"
#include "trident/models/hf.h"
#include "trident/models/pretrained.h"
#include "trident/nn/nn.h"
#include "trident/optim/loss_scaler.h"
#include "trident/optim/optimizer.h"
#include "trident/optim/schedule.h"
#include "trident/parallel/data/grad_sync.h"
#include "trident/parallel/pipeline/executor.h"
#include "trident/parallel/pipeline/schedule.h"
#include "trident/parallel/tensor/mappings.h"
#include "trident/parallel/zero/zero_optimizer.h"
#include "trident/train/config/config.h"
#include "trident/train/parallel_model.h"
#include "trident/train/trainer.h"

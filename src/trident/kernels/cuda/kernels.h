// Every CUDA kernel family, for ops/ dispatch (TRIDENT_KERNEL in ops/dispatch.h).
#pragma once

#include "trident/kernels/cuda/activation.h"
#include "trident/kernels/cuda/attention.h"
#include "trident/kernels/cuda/dropout.h"
#include "trident/kernels/cuda/elementwise.h"
#include "trident/kernels/cuda/embedding.h"
#include "trident/kernels/cuda/loss.h"
#include "trident/kernels/cuda/matmul.h"
#include "trident/kernels/cuda/norm.h"
#include "trident/kernels/cuda/optimizer.h"
#include "trident/kernels/cuda/reduce.h"
#include "trident/kernels/cuda/rope.h"
#include "trident/kernels/cuda/shape.h"
#include "trident/kernels/cuda/softmax.h"

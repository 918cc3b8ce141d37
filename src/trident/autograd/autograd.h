// Umbrella header of the autograd module: Variables, the engine, recomputation
// and every differentiable function.
#pragma once

#include "trident/autograd/checkpoint.h"
#include "trident/autograd/function.h"
#include "trident/autograd/functions/activation.h"
#include "trident/autograd/functions/attention.h"
#include "trident/autograd/functions/dropout.h"
#include "trident/autograd/functions/elementwise.h"
#include "trident/autograd/functions/embedding.h"
#include "trident/autograd/functions/loss.h"
#include "trident/autograd/functions/matmul.h"
#include "trident/autograd/functions/norm.h"
#include "trident/autograd/functions/rope.h"
#include "trident/autograd/functions/softmax.h"
#include "trident/autograd/variable.h"

// Umbrella header of the nn module.
#pragma once

#include "trident/nn/context.h"
#include "trident/nn/gather.h"
#include "trident/nn/layers.h"
#include "trident/nn/module.h"
#include "trident/nn/moe.h"
#include "trident/nn/transformer.h"

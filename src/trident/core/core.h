// Umbrella header of the core module.
#pragma once

#include "trident/core/backend.h"
#include "trident/core/convert.h"
#include "trident/core/device.h"
#include "trident/core/dtype.h"
#include "trident/core/error.h"
#include "trident/core/memory.h"
#include "trident/core/parallel.h"
#include "trident/core/rng.h"
#include "trident/core/shape.h"
#include "trident/core/storage.h"
#include "trident/core/tensor.h"
#include "trident/core/text.h"
#include "trident/core/version.h"

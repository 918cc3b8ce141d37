// Umbrella header of the data module: tokenizers, the Megatron-compatible
// indexed dataset, preprocessing, GPT samples, blending, masked-LM masking and
// loading.
#pragma once

#include "trident/data/blended_dataset.h"
#include "trident/data/bpe_trainer.h"
#include "trident/data/gpt_dataset.h"
#include "trident/data/indexed_dataset.h"
#include "trident/data/loader.h"
#include "trident/data/masked_lm.h"
#include "trident/data/preprocess.h"
#include "trident/data/split.h"
#include "trident/data/tokenizer.h"

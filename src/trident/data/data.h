// Umbrella header of the data module: tokenizers, the Megatron-compatible
// indexed dataset, preprocessing, GPT samples, one padded document per sample,
// blending, masked-LM masking and loading.
#pragma once

#include "trident/data/dataset/blended_dataset.h"
#include "trident/data/tokenizer/bpe_trainer.h"
#include "trident/data/dataset/document_dataset.h"
#include "trident/data/dataset/gpt_dataset.h"
#include "trident/data/dataset/indexed_dataset.h"
#include "trident/data/dataset/loader.h"
#include "trident/data/dataset/masked_lm.h"
#include "trident/data/dataset/preprocess.h"
#include "trident/data/dataset/split.h"
#include "trident/data/tokenizer/tokenizer.h"

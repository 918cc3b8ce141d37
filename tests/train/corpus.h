// A small corpus in the built-in corpus's format for training tests: text from
// a tiny grammar (learnable structure), a byte-level BPE tokenizer.json
// trained by trident, and Megatron .bin/.idx made by trident's preprocess.
#pragma once

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "trident/data/tokenizer/bpe_trainer.h"
#include "trident/data/dataset/preprocess.h"
#include "trident/data/tokenizer/tokenizer.h"
#include "trident/data/tokenizer/wordpiece_trainer.h"

namespace trident::testing {

inline std::string grammar_corpus(int lines) {
  const std::vector<std::string> subjects = {"the king", "a shepherd", "the people", "my brother", "the servant"};
  const std::vector<std::string> verbs = {"went unto", "spake to", "looked upon", "blessed", "followed"};
  const std::vector<std::string> objects = {"the city", "the mountain", "his house", "the river", "the temple"};
  std::mt19937 gen(42);
  std::string out;
  for (int i = 0; i < lines; ++i) {
    out += subjects[gen() % subjects.size()] + " " + verbs[gen() % verbs.size()] + " " +
           objects[gen() % objects.size()] + ", and " + subjects[gen() % subjects.size()] + " " +
           verbs[gen() % verbs.size()] + " " + objects[gen() % objects.size()] + ".\n";
  }
  return out;
}

// Writes DIR/tokenizer.json and DIR/corpus.{bin,idx}; with `tokenizer`, DIR/corpus.{bin,idx} made with that
// tokenizer.json instead (a second dataset to blend with the first, whose ids mean the same tokens).
inline void make_corpus(const std::filesystem::path& dir, int lines = 3000, const std::filesystem::path& tokenizer = {}) {
  std::filesystem::create_directories(dir);
  const std::string text = grammar_corpus(lines);
  std::ofstream(dir / "corpus.txt") << text;
  if (tokenizer.empty()) {
    data::BpeTrainerOptions bo;
    bo.vocab_size = 320;
    bo.special_tokens = {"<|endoftext|>"};
    bo.threads = 1;
    data::BpeTrainer trainer(bo);
    trainer.feed(text);
    data::write_tokenizer_json(trainer.train(), dir / "tokenizer.json");
  }
  data::PreprocessOptions po;
  po.inputs = {dir / "corpus.txt"};
  po.output_prefix = (dir / "corpus").string();
  po.append_eod = true;
  po.workers = 1;
  po.tokenizer_source = (tokenizer.empty() ? dir / "tokenizer.json" : tokenizer).string();
  data::preprocess(data::Tokenizer::from_file(po.tokenizer_source), po);
}

// Overrides for a tiny GPT on that corpus.
inline std::vector<std::string> tiny_run(const std::filesystem::path& dir, const std::string& cache) {
  return {"model.arch=gpt2", "model.n_layer=2", "model.n_head=4", "model.d_model=32", "model.max_seq_len=32",
          "data.tokenizer=" + (dir / "tokenizer.json").string(),
          "data.paths=[\"" + (dir / "corpus").string() + "\"]", "data.split=\"90,10,0\"",
          "data.cache_dir=" + (dir / cache).string(), "train.seq_len=32", "train.log_interval=1000",
          "train.eval_interval=0", "optim.lr=3e-3", "schedule.warmup_steps=2", "train.threads=1"};
}

// A WordPiece tokenizer (200 tokens) and encoder samples of the grammar for BERT: DIR/tokenizer.json,
// DIR/corpus.{bin,idx}.
inline void make_bert_corpus(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const std::string text = grammar_corpus(1500);
  std::ofstream(dir / "corpus.txt") << text;
  data::WordPieceTrainerOptions wo;
  wo.vocab_size = 200;
  data::WordPieceTrainer trainer(wo);
  trainer.feed(text);
  data::write_wordpiece_tokenizer_json(trainer.train(), dir / "tokenizer.json");
  data::PreprocessOptions po;
  po.inputs = {dir / "corpus.txt"};
  po.output_prefix = (dir / "corpus").string();
  po.encoder = true;
  po.workers = 1;
  data::preprocess(data::Tokenizer::from_file(dir / "tokenizer.json"), po);
}

}  // namespace trident::testing

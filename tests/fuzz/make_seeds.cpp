// Writes seed inputs for the fuzzers: a valid tokenizer.json (trained on a
// sentence), a valid .idx image prefixed by its .bin size, and the data.pkl of a
// state dict as torch.save writes it (views of a shared storage, two dtypes).
// usage: make_seeds TOKENIZER_CORPUS_DIR IDX_CORPUS_DIR PICKLE_CORPUS_DIR
#include <cstdint>
#include <fstream>
#include <string>

#include "trident/data/tokenizer/bpe_trainer.h"
#include "trident/data/dataset/indexed_dataset.h"
#include "testing/torch_zip.h"

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  trident::data::BpeTrainerOptions o;
  o.vocab_size = 290;
  o.min_frequency = 1;
  o.special_tokens = {"<|endoftext|>"};
  trident::data::BpeTrainer t(o);
  t.feed("In the beginning God created the heaven and the earth. Don't   stop 123!\n");
  std::ofstream(std::string(argv[1]) + "/seed.json", std::ios::binary) << trident::data::tokenizer_json(t.train());
  trident::data::IndexContent c;
  c.dtype = trident::data::TokenDType::u16;
  c.sequence_lengths = {3, 1, 2};
  c.sequence_pointers = {0, 6, 8};
  c.document_indices = {0, 1, 2, 3};
  const std::uint64_t bin = 12;
  std::ofstream out(std::string(argv[2]) + "/seed.idx", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&bin), 8);
  out << trident::data::serialize_index(c);
  std::ofstream(std::string(argv[3]) + "/seed.pkl", std::ios::binary)
      << trident::testing::state_dict_pickle({{"w", "FloatStorage", "0", 12, 0, {3, 4}, {4, 1}},
                                              {"w.t", "FloatStorage", "0", 12, 1, {2, 3}, {1, 4}},
                                              {"b", "BFloat16Storage", "1", 4, 0, {4}, {1}}});
  return 0;
}

// The registry of model families: the one place a family is added
// (docs/architecture.md, "Adding a model family").
#include <algorithm>
#include <fmt/format.h>

#include "trident/models/family.h"

namespace trident::models {

// Each family's definition, in its own file under models/families/.
Family gpt2_family();
Family llama_family();
Family mistral_family();
Family mixtral_family();
Family qwen2_family();
Family qwen2_moe_family();
Family bert_family();

namespace {

std::vector<Family> make_families() {
  std::vector<Family> all;
  for (auto make : {gpt2_family, llama_family, mistral_family, mixtral_family, qwen2_family, qwen2_moe_family, bert_family}) all.push_back(make());
  for (Family& f : all) {
    if (!f.hf_names) f.hf_names = [](const std::string& name) { return std::vector<std::string>{name}; };
    if (!f.hf_export_names) {
      f.hf_export_names = [hf_names = f.hf_names](const std::string& name) {
        return std::vector<std::string>{hf_names(name).front()};
      };
    }
    if (!f.optional_in_hf) f.optional_in_hf = [](const std::string&) { return false; };
    if (!f.hf_buffer) {
      f.hf_buffer = [](const std::string& name) {
        for (const std::string_view suffix : {".attn.bias", ".attn.masked_bias", "embeddings.position_ids",
                                              "rotary_emb.inv_freq"})
          if (name.ends_with(suffix)) return true;
        return false;
      };
    }
  }
  return all;
}

const std::vector<Family>& registry() {
  static const std::vector<Family> all = make_families();
  return all;
}

}  // namespace

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> all = [] {
    std::vector<const Family*> out;
    for (const Family& f : registry()) out.push_back(&f);
    return out;
  }();
  return all;
}

std::string family_names() {
  std::string out;
  for (const Family* f : families()) out += (out.empty() ? "" : ", ") + f->name;
  return out;
}

const Family& family(const std::string& name) {
  for (const Family* f : families()) {
    if (f->name == name) return *f;
  }
  TRIDENT_FAIL("model.arch: unknown model family '{}' (known: {})", name, family_names());
}

const Family* family_for_model_type(const std::string& model_type) {
  for (const Family* f : families()) {
    if (f->hf_model_type == model_type) return f;
  }
  return nullptr;
}

TransformerSpec preset(const std::string& name) {
  for (const Family* f : families()) {
    for (const Family::Preset& p : f->presets) {
      if (p.name == name) return p.make();
    }
  }
  TRIDENT_FAIL("model.preset: unknown preset '{}' (known: {})", name, fmt::join(preset_names(), ", "));
}

std::vector<std::string> preset_names() {
  std::vector<std::string> out;
  for (const Family* f : families()) {
    for (const Family::Preset& p : f->presets) out.push_back(p.name);
  }
  return out;
}

}  // namespace trident::models

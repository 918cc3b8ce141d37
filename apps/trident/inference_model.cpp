// The --precision option of generate and eval (opening a checkpoint for inference is train/inference.h's).
#include "commands.h"
#include "trident/core/dtype.h"
#include "trident/core/error.h"

namespace trident::cli {

void add_precision_option(CLI::App& command, std::string& precision) {
  command.add_option("--precision", precision, "Compute dtype of the forward pass (weights stay f32)")
      ->check(CLI::Validator(
          [](const std::string& text) {
            try {
              parse_precision(text, "--precision");
              return std::string();
            } catch (const Error& e) {
              return e.message();
            }
          },
          "fp32|bf16|fp16"))
      ->capture_default_str();
}

DType precision_dtype(const std::string& precision) {
  return parse_precision(precision, "--precision");
}

}  // namespace trident::cli

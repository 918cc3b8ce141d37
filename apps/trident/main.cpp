// trident: the command-line entry point. The only place that catches errors,
// prints one clear line (more with --verbose) and exits non-zero.
#include <cstdio>
#include <cstring>
#include <exception>

#include "commands.h"
#include "trident/core/error.h"
#include "trident/core/version.h"

int main(int argc, char** argv) {
  CLI::App app{"trident: train large language models with 3D parallelism", "trident"};
  app.set_version_flag("--version", std::string("trident ") + trident::kVersion);
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Print error details (source location)");
  app.require_subcommand(1);

  trident::cli::add_info_command(app);
  trident::cli::add_tokenizer_command(app);
  trident::cli::add_preprocess_command(app);
  trident::cli::add_train_command(app);
  trident::cli::add_generate_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const trident::Error& e) {
    std::fprintf(stderr, "trident: error: %s\n", verbose ? e.what() : e.message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trident: error: %s\n", e.what());
    return 1;
  }
  return 0;
}

#include "trident/core/error.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

namespace trident {
namespace {
std::atomic<int> g_rank{-1};

std::string short_file(const char* file) {
  // Keep the path from "trident/" or the last two components: enough to find it.
  std::string_view f(file);
  if (auto pos = f.rfind("src/"); pos != std::string_view::npos) f.remove_prefix(pos + 4);
  return std::string(f);
}
}  // namespace

void set_error_rank(int rank) noexcept { g_rank.store(rank, std::memory_order_relaxed); }
int error_rank() noexcept { return g_rank.load(std::memory_order_relaxed); }

const std::string& host_name() {
  static const std::string name = [] {
    char buf[256] = {};
    if (gethostname(buf, sizeof(buf) - 1) != 0) return std::string("unknown-host");
    return std::string(buf);
  }();
  return name;
}

static std::string compose(const std::string& message, const std::string& where, int rank) {
  if (rank >= 0) return fmt::format("[rank {} on {}] {} (at {})", rank, host_name(), message, where);
  return fmt::format("{} (at {})", message, where);
}

Error::Error(std::string message, std::string where)
    : std::runtime_error(compose(message, where, error_rank())),
      message_(std::move(message)),
      where_(std::move(where)),
      rank_(error_rank()) {}

namespace detail {
void throw_error(const char* file, int line, std::string message) {
  throw Error(std::move(message), fmt::format("{}:{}", short_file(file), line));
}
}  // namespace detail

}  // namespace trident

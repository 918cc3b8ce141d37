// Errors: the two tiers of checks every trident module uses.
//
// TRIDENT_CHECK(cond, fmt, args...) guards conditions that depend on input
// (shapes, dtypes, files, config values). On failure it throws trident::Error
// whose message names the offending value; the error also records the rank,
// host and source location so a multi-process job reports where it failed.
// TRIDENT_DCHECK guards internal invariants and compiles out in release builds.
// Library code never exits: only the CLI's main catches and terminates.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace trident {

class Error : public std::runtime_error {
 public:
  // `message` is the human part; `where` is "file:line"; what() combines them
  // with the process context ("[rank 3 on host] message (at file:line)").
  Error(std::string message, std::string where);

  const std::string& message() const noexcept { return message_; }
  const std::string& where() const noexcept { return where_; }
  int rank() const noexcept { return rank_; }

 private:
  std::string message_;
  std::string where_;
  int rank_;
};

// The process's rank in the job (-1 before the distributed runtime starts).
// Set once by the runtime; read by Error to label messages.
void set_error_rank(int rank) noexcept;
int error_rank() noexcept;
const std::string& host_name();

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, std::string message);
}  // namespace detail

}  // namespace trident

#define TRIDENT_CHECK(cond, ...)                                                   \
  do {                                                                             \
    if (!(cond)) [[unlikely]] {                                                    \
      ::trident::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
    }                                                                              \
  } while (0)

#define TRIDENT_FAIL(...) ::trident::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

#ifdef NDEBUG
#define TRIDENT_DCHECK(cond, ...) \
  do {                            \
  } while (0)
#else
#define TRIDENT_DCHECK(cond, ...)                                                         \
  do {                                                                                    \
    if (!(cond)) [[unlikely]] {                                                           \
      ::trident::detail::throw_error(__FILE__, __LINE__,                                  \
                                     "internal invariant failed: " #cond " " __VA_OPT__(+ ::fmt::format(__VA_ARGS__))); \
    }                                                                                     \
  } while (0)
#endif

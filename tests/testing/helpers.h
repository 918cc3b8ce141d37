// Helpers shared by the GoogleTest suites (include as "testing/helpers.h").
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "trident/core/error.h"
#include "trident/core/tensor.h"

namespace trident::testing {

// Uniform in [lo, hi), drawn in f64 from `seed`, then converted to `dtype`.
inline Tensor random_tensor(Shape shape, std::uint64_t seed, double lo = -1.0, double hi = 1.0,
                            DType dtype = DType::f32) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor t = Tensor::empty(std::move(shape), DType::f64);
  for (double& v : t.span<double>()) v = dist(gen);
  return t.to(dtype);
}

// A host copy of any floating tensor in f64.
inline std::vector<double> f64(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

// ‖a − b‖ / ‖b‖ (‖a − b‖ when b is all zeros).
inline double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// A fresh directory under the system temp dir, NAME-PID, removed on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// `none` when `f` throws no trident::Error, else part(the error).
template <typename Part>
std::string thrown(const std::function<void()>& f, const char* none, Part part) {
  try {
    f();
  } catch (const Error& e) {
    return part(e);
  }
  return none;
}

// The message of the trident::Error `f` throws, or "" when it throws none.
inline std::string error_message(const std::function<void()>& f) {
  return thrown(f, "", [](const Error& e) { return e.message(); });
}

// The full what() (with rank and source location) of the error, or "no error".
inline std::string error_what(const std::function<void()>& f) {
  return thrown(f, "no error", [](const Error& e) { return std::string(e.what()); });
}

}  // namespace trident::testing

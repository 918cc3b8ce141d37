// Helpers shared by the attention kernel tests (attention_test.cpp, attention_chunks_test.cpp): random
// inputs, error measures, packed-document starts and the dropout stream.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "trident/core/rng.h"
#include "trident/core/tensor.h"

namespace trident::testing {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline Tensor random_f64(std::mt19937_64& gen, Shape shape) {
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  Tensor t = Tensor::empty(std::move(shape), DType::f64);
  for (double& x : t.span<double>()) x = dist(gen);
  return t;
}

inline std::vector<double> values(const Tensor& t) { return t.to(DType::f64).to_vector<double>(); }

// Largest element error, relative to the largest reference element.
inline double max_error(const std::vector<double>& a, const std::vector<double>& b) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / std::max(scale, 1e-300);
}

inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

// Document starts [B, T] (i32) whose samples, in turn: hold one document; documents of 1, 63, 64, 65 and
// 7 tokens and then the rest (starts on both sides of 64-key tile boundaries); every token its own
// document; two documents split at T/2.
inline Tensor packed_documents(std::int64_t B, std::int64_t T) {
  std::vector<std::int32_t> starts(static_cast<std::size_t>(B * T));
  for (std::int64_t b = 0; b < B; ++b) {
    std::vector<std::int64_t> opens;
    switch (b % 4) {
      case 1:
        for (std::int64_t at : {1, 64, 128, 193, 200})
          if (at < T) opens.push_back(at);
        break;
      case 2:
        for (std::int64_t t = 1; t < T; ++t) opens.push_back(t);
        break;
      case 3:
        opens.push_back(T / 2);
        break;
      default:
        break;
    }
    std::int32_t start = 0;
    std::size_t next = 0;
    for (std::int64_t t = 0; t < T; ++t) {
      if (next < opens.size() && opens[next] == t) {
        start = static_cast<std::int32_t>(t);
        ++next;
      }
      starts[static_cast<std::size_t>(b * T + t)] = start;
    }
  }
  return Tensor::from_vector<std::int32_t>(starts, {B, T});
}

inline const CounterRng kDropoutRng(2024, "test/attention/probs");

}  // namespace trident::testing

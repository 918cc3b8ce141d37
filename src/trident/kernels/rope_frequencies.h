// RoPE's rotation frequencies, shared by the CPU and CUDA kernels (header-only,
// C++17, no fmt, so .cu files compute exactly the host's numbers).
//
// Pair i of a head of D elements turns at inv_freq(i) = theta^(−2i/D) radians
// per position. A model trained for a longer context may rescale them, as
// Hugging Face's rope_type values do:
//   linear: every frequency divided by `factor` (position interpolation).
//   llama3: Llama 3.1's rule, with L = original_max_position. A pair whose
//           wavelength 2π / inv_freq is shorter than L / high_freq_factor is
//           kept; one longer than L / low_freq_factor is divided by `factor`;
//           in between, s = (L / wavelength − low_freq_factor) /
//           (high_freq_factor − low_freq_factor) blends the two:
//           (1 − s) · inv_freq / factor + s · inv_freq.
// Everything is computed in f64.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TRIDENT_HOST_DEVICE __host__ __device__
#else
#define TRIDENT_HOST_DEVICE
#endif

namespace trident {

enum class RopeScaling : std::int8_t { none, linear, llama3 };

struct RopeFrequencies {
  double theta = 10000.0;
  RopeScaling scaling = RopeScaling::none;
  double factor = 1.0;                    // linear, llama3
  double low_freq_factor = 1.0;           // llama3
  double high_freq_factor = 4.0;          // llama3
  double original_max_position = 8192.0;  // llama3: the context the model was first trained for

  TRIDENT_HOST_DEVICE double inv_freq(std::int64_t i, std::int64_t head_dim) const {
    const double base = pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    switch (scaling) {
      case RopeScaling::none:
        return base;
      case RopeScaling::linear:
        return base / factor;
      case RopeScaling::llama3: {
        const double wavelength = 6.283185307179586 / base;
        if (wavelength < original_max_position / high_freq_factor) return base;
        if (wavelength > original_max_position / low_freq_factor) return base / factor;
        const double s =
            (original_max_position / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor);
        return (1.0 - s) * base / factor + s * base;
      }
    }
    return base;
  }
};

}  // namespace trident

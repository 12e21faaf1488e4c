#pragma once
// Host-side codecs for the storage formats the gemm workload verifies: bf16, fp16, fp8 (e4m3 as
// OCP/NVIDIA "fn": no infinities, one NaN code; e5m2 IEEE-like), fp4 e2m1 and the ue4m3 block
// scales. Decoders read the raw bytes copied back from the device, so the reference is computed on
// exactly what the GPU multiplied. Encoders round to nearest even; the fp8 and fp4 ones saturate
// to the largest finite value, as CUDA's __NV_SATFINITE conversions do. No CUDA headers.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace itera::gemm::numeric {

// ---------------------------------------------------------------------------------------------
// Decoders

inline float bf16_to_float(std::uint16_t bits) {
  const std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

namespace detail {
// A minifloat with `man_bits` of mantissa and exponent bias `bias`, from its biased exponent and
// mantissa fields; specials are the caller's business.
inline float minifloat_value(bool negative, int biased_exp, int mantissa, int man_bits, int bias) {
  const double m = static_cast<double>(mantissa) / static_cast<double>(1 << man_bits);
  const double v = biased_exp == 0 ? std::ldexp(m, 1 - bias) : std::ldexp(1.0 + m, biased_exp - bias);
  return static_cast<float>(negative ? -v : v);
}
}  // namespace detail

inline float fp16_to_float(std::uint16_t bits) {
  const bool negative = (bits >> 15) != 0;
  const int e = (bits >> 10) & 0x1f;
  const int m = bits & 0x3ff;
  if (e == 0x1f) {
    if (m != 0) return std::numeric_limits<float>::quiet_NaN();
    return negative ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  return detail::minifloat_value(negative, e, m, 10, 15);
}

inline float fp8_e4m3_to_float(std::uint8_t bits) {
  const bool negative = (bits >> 7) != 0;
  const int e = (bits >> 3) & 0xf;
  const int m = bits & 0x7;
  if (e == 0xf && m == 0x7) return std::numeric_limits<float>::quiet_NaN();  // the only special
  return detail::minifloat_value(negative, e, m, 3, 7);
}

inline float fp8_e5m2_to_float(std::uint8_t bits) {
  const bool negative = (bits >> 7) != 0;
  const int e = (bits >> 2) & 0x1f;
  const int m = bits & 0x3;
  if (e == 0x1f) {
    if (m != 0) return std::numeric_limits<float>::quiet_NaN();
    return negative ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
  }
  return detail::minifloat_value(negative, e, m, 2, 15);
}

// One e2m1 code in the low four bits: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
inline float fp4_e2m1_to_float(std::uint8_t nibble) {
  const bool negative = (nibble & 0x8) != 0;
  return detail::minifloat_value(negative, (nibble >> 1) & 0x3, nibble & 0x1, 1, 1);
}

// Element `index` of a packed e2m1 array: two per byte, the even element in the low nibble.
inline float fp4_e2m1_packed_at(const std::uint8_t* packed, std::uint64_t index) {
  const std::uint8_t byte = packed[index / 2];
  return fp4_e2m1_to_float(index % 2 == 0 ? static_cast<std::uint8_t>(byte & 0xf) : static_cast<std::uint8_t>(byte >> 4));
}

// Unsigned e4m3 (block scales of fp4 GEMMs): the e4m3 code without its sign bit.
inline float ue4m3_to_float(std::uint8_t bits) { return fp8_e4m3_to_float(static_cast<std::uint8_t>(bits & 0x7f)); }

// ---------------------------------------------------------------------------------------------
// Encoders

namespace detail {
struct minifloat_fields {
  int biased_exp;
  int mantissa;
};
// Rounds |a| (finite, >= 0) to nearest even with `man_bits` of mantissa and the given bias, without
// an exponent ceiling: the caller saturates or overflows.
inline minifloat_fields round_minifloat(double a, int man_bits, int bias) {
  if (a == 0) return {0, 0};
  int e2 = 0;
  (void)std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1): unbiased exponent e2 - 1
  int exponent = e2 - 1;
  const int min_exponent = 1 - bias;  // of the smallest normal; below it the quantum stays fixed
  if (exponent < min_exponent) exponent = min_exponent;
  const double quantum = std::ldexp(1.0, exponent - man_bits);
  double q = std::nearbyint(a / quantum);  // exact division by a power of two; ties to even
  const double implicit_one = static_cast<double>(1 << man_bits);
  if (q >= 2 * implicit_one) {  // rounded up into the next binade
    q /= 2;
    ++exponent;
  }
  if (q >= implicit_one) return {exponent + bias, static_cast<int>(q - implicit_one)};
  return {0, static_cast<int>(q)};  // subnormal (or zero)
}
}  // namespace detail

inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f)) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // stay a (quiet) NaN
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even on the dropped 16 bits
  return static_cast<std::uint16_t>(u >> 16);
}

inline std::uint16_t float_to_fp16(float f) {
  const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  if (std::isnan(f)) return 0x7e00;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(f)) return static_cast<std::uint16_t>(sign | 0x7c00);
  const auto r = detail::round_minifloat(a, 10, 15);
  if (r.biased_exp >= 0x1f) return static_cast<std::uint16_t>(sign | 0x7c00);  // IEEE: overflow to infinity
  return static_cast<std::uint16_t>(sign | (r.biased_exp << 10) | r.mantissa);
}

inline std::uint8_t float_to_fp8_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fmin(std::fabs(static_cast<double>(f)), 448.0);  // saturate, infinities too
  const auto r = detail::round_minifloat(a, 3, 7);
  return static_cast<std::uint8_t>(sign | (r.biased_exp << 3) | r.mantissa);
}

inline std::uint8_t float_to_fp8_e5m2(float f) {
  if (std::isnan(f)) return 0x7f;
  const std::uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const double a = std::fmin(std::fabs(static_cast<double>(f)), 57344.0);
  const auto r = detail::round_minifloat(a, 2, 15);
  return static_cast<std::uint8_t>(sign | (r.biased_exp << 2) | r.mantissa);
}

inline std::uint8_t float_to_fp4_e2m1(float f) {
  if (std::isnan(f)) return 0x7;  // no NaN code: CUDA's conversion gives +6 whatever the sign
  const std::uint8_t sign = std::signbit(f) ? 0x8 : 0;
  const double a = std::fmin(std::fabs(static_cast<double>(f)), 6.0);
  const auto r = detail::round_minifloat(a, 1, 1);
  return static_cast<std::uint8_t>(sign | (r.biased_exp << 1) | r.mantissa);
}

}  // namespace itera::gemm::numeric

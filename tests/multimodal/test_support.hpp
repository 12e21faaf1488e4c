#pragma once
// Helpers shared by the multimodal tests: a fresh temporary folder, file I/O, image comparison.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "workloads/multimodal/image_codec.hpp"

namespace itera::mm::test {

// A new empty folder under the system temp folder, removed when the object goes.
class temp_dir {
 public:
  temp_dir() {
    std::random_device rd;
    for (;;) {
      m_path = std::filesystem::temp_directory_path() / ("itera-mm-" + std::to_string(rd()));
      if (std::filesystem::create_directory(m_path)) break;
    }
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
  }
  const std::filesystem::path& path() const { return m_path; }

 private:
  std::filesystem::path m_path;
};

inline std::vector<std::uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::filesystem::path& p, const std::vector<std::uint8_t>& b) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

inline double psnr(const rgb_image& a, const rgb_image& b) {
  double se = 0;
  for (std::size_t i = 0; i < a.pixels.size(); ++i) {
    const double d = double(a.pixels[i]) - double(b.pixels[i]);
    se += d * d;
  }
  const double mse = se / static_cast<double>(a.pixels.size());
  return mse == 0 ? INFINITY : 10.0 * std::log10(255.0 * 255.0 / mse);
}

inline rgb_image make_image(std::uint32_t w, std::uint32_t h, std::uint8_t r, std::uint8_t g, std::uint8_t b) {
  rgb_image img;
  img.width = w;
  img.height = h;
  img.pixels.resize(std::size_t{3} * w * h);
  for (std::size_t i = 0; i < std::size_t{w} * h; ++i) {
    img.pixels[3 * i] = r;
    img.pixels[3 * i + 1] = g;
    img.pixels[3 * i + 2] = b;
  }
  return img;
}

}  // namespace itera::mm::test

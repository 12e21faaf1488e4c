#pragma once
// Photo-like test images, a pure function of (seed, width, height).
//
// Why not flat colour or noise: a decoder's cost depends on what it decodes. JPEG entropy decoding
// scales with the number of non-zero DCT coefficients, PNG inflate with the compressed size; flat
// images make both trivially cheap, white noise makes JPEG files 3-4x larger than a photograph's and
// PNG incompressible. These images are built from what photographs are made of:
//   - a smooth two-colour gradient (sky, wall, lighting);
//   - fractal value noise over octaves from half the image down to 2 px, with per-octave amplitude
//     falling off slightly faster than natural images' 1/f amplitude spectrum (whose energy per
//     octave is constant), so that coarse structure dominates;
//   - a low-frequency mask that makes some regions smooth (sky) and others textured (foliage);
//   - soft-edged rotated ellipses with their own colours and shading (objects, with edges that are
//     neither aliased nor blurred away);
//   - fine grain of about 1.5 levels (sensor noise).
// Calibrated so that the JPEG at quality 90 of a 1024x1024 image lands at 1.5-3 bits per pixel, the
// range reported for photographs (tests/multimodal pins it; docs/multimodal.md cites the sources).
//
// Deterministic on every platform: integer hashing (splitmix64) for all randomness, and only IEEE
// basic operations (+ - * / sqrt, no libm transcendentals) in a fixed order for the pixels.
#include <cstdint>

#include "workloads/multimodal/image_codec.hpp"

namespace itera::mm {

// std::invalid_argument for a zero or over-16384 side.
rgb_image synthesize_photo(std::uint64_t seed, std::uint32_t width, std::uint32_t height);

// splitmix64: the generator's and the request file's randomness.
std::uint64_t splitmix64(std::uint64_t x);

}  // namespace itera::mm

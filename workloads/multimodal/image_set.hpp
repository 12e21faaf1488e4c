#pragma once
// The multimodal workload's images on disk: a folder of the user's own images, or a test set that
// `itera data images` generates (docs/multimodal.md).
//
// A generated set:
//   DIR/manifest.json    {"format": "itera.images/1", "seed": S, "jpeg_quality": Q, "images": [
//                          {"index": 0, "path": "images/000000_224x224.jpg", "format": "jpeg",
//                           "width": 224, "height": 224, "bytes": 14921}, ...],
//                         "requests": {"path": "requests.jsonl", "count": N, ...}}
//   DIR/images/NNNNNN_WxH.{jpg,png}
//   DIR/requests.jsonl   one request per line (workloads/multimodal/requests.hpp)
// Images are numbered in the order size, then copy (--count), then format; the JPEG and PNG of one
// (size, copy) hold the same pixels, so their decode costs compare like for like.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "workloads/multimodal/image_codec.hpp"

namespace itera::mm {

inline constexpr std::string_view manifest_format = "itera.images/1";
inline constexpr std::string_view manifest_file = "manifest.json";
inline constexpr std::string_view requests_file = "requests.jsonl";

struct image_entry {
  std::size_t index = 0;              // position in the set; what errors and requests refer to
  std::string relative_path;          // '/'-separated, relative to the set's folder
  std::filesystem::path path;         // to open
  image_format format = image_format::unknown;  // manifest's, or guessed from the extension (the
                                                // decoder goes by the file's signature)
  std::uint32_t width = 0, height = 0;          // manifest's; 0 when not known before decoding
  std::uint64_t bytes = 0;                      // manifest's, or the size on disk when listed
};

struct image_set {
  std::filesystem::path root;
  std::vector<image_entry> entries;
  bool from_manifest = false;      // a generated set (manifest.json) or a scanned folder
  std::size_t skipped_files = 0;   // files in a scanned folder without an image extension
};

// File name extensions taken as images when scanning a folder (case-insensitive): jpg jpeg jpe jfif
// png, and gif bmp webp tif tiff heic heif avif jp2 j2k jxl, which the decoder then refuses one by one
// ("unsupported format") so that a user sees them counted instead of silently left out.
bool has_image_extension(const std::filesystem::path& path);

// Lists `dir`. With an itera manifest.json there (format "itera.images/1"): its images, in its order
// (a file listed but missing fails at the read stage, by index). Otherwise: every file with an image
// extension under `dir`, recursively, hidden ('.') files and folders left out, sorted by relative
// path (byte order), so indices are stable between runs. input_error when `dir` is not a readable
// folder, when the manifest is malformed, or when no image is found.
image_set list_images(const std::filesystem::path& dir);

// "224,448,1280x720" -> {{224,224},{448,448},{1280,720}}: N is NxN, WxH is W wide and H high.
// usage_error (naming the bad item and the expected form) for an empty list, a malformed item, a
// side outside 1..16384, or a size given twice.
std::vector<std::pair<std::uint32_t, std::uint32_t>> parse_sizes(std::string_view text);

struct image_set_spec {
  std::uint64_t seed = 1;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> sizes;  // (width, height)
  std::size_t count = 1;                                       // images per size and format
  std::vector<image_format> formats{image_format::jpeg, image_format::png};
  int jpeg_quality = 90;
  std::size_t requests = 64;
  std::size_t max_images_per_request = 4;
  std::uint32_t prompt_tokens = 128;
  std::uint32_t output_tokens = 64;
  std::size_t threads = 0;  // 0: the machine's hardware threads
};

struct image_set_summary {
  std::size_t images = 0;
  std::uint64_t bytes = 0;  // of the image files
  std::size_t requests = 0;
  std::filesystem::path manifest, requests_path;
};

// Writes a generated set into `out`, which must not exist or be an empty folder (usage_error
// otherwise: a set is never written over other files). Deterministic: the same spec writes the same
// bytes (given the same libjpeg-turbo and libpng versions), whatever the thread count.
// usage_error for an out-of-range spec; input_error when writing fails.
image_set_summary write_image_set(const std::filesystem::path& out, const image_set_spec& spec);

// 64-bit FNV-1a of a byte string, as 16 hex digits: the manifest's content digest of each image.
std::string fnv1a64_hex(const std::uint8_t* data, std::size_t size);

}  // namespace itera::mm

// The thread pool, the generated set on disk, folder listing, the requests file, and the read and
// decode stages with bad images among good ones.
#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <nlohmann/json.hpp>

#include "itera/core/errors.hpp"
#include "tests/multimodal/test_support.hpp"
#include "workloads/multimodal/image_set.hpp"
#include "workloads/multimodal/loader.hpp"
#include "workloads/multimodal/requests.hpp"
#include "workloads/multimodal/synth.hpp"

namespace itera::mm {
namespace {

namespace fs = std::filesystem;
using test::read_bytes;
using test::temp_dir;
using test::write_bytes;

image_set_spec small_spec() {
  image_set_spec spec;
  spec.seed = 11;
  spec.sizes = {{64, 64}, {96, 48}, {40, 72}};
  spec.count = 2;
  spec.requests = 20;
  spec.max_images_per_request = 3;
  spec.prompt_tokens = 32;
  spec.output_tokens = 16;
  spec.threads = 2;
  return spec;
}

TEST(MultimodalThreadPool, RunsEveryItemOnceOnItsWorkers) {
  for (std::size_t threads : {1u, 2u, 5u}) {
    thread_pool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int round = 0; round < 3; ++round) {  // the pool is reused batch after batch
      std::vector<std::atomic<int>> hits(1000);
      std::atomic<bool> bad_worker{false};
      pool.for_each(hits.size(), [&](std::size_t i, std::size_t w) {
        hits[i].fetch_add(1);
        if (w >= threads) bad_worker = true;
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
      EXPECT_FALSE(bad_worker);
    }
    pool.for_each(0, [](std::size_t, std::size_t) { FAIL(); });
  }
  EXPECT_THROW(thread_pool(0), std::invalid_argument);
}

TEST(MultimodalThreadPool, UsesSeveralThreadsAndRethrowsTheFirstFailure) {
  thread_pool pool(2);
  std::mutex m;
  std::set<std::thread::id> ids;
  std::atomic<int> inside{0}, most{0};
  pool.for_each(8, [&](std::size_t, std::size_t) {
    const int now = ++inside;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {}
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    --inside;
    std::lock_guard lock(m);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_EQ(most.load(), 2);
  EXPECT_FALSE(ids.count(std::this_thread::get_id()));
  EXPECT_THROW(pool.for_each(50, [](std::size_t i, std::size_t) {
    if (i == 7) throw std::runtime_error("boom");
  }), std::runtime_error);
  std::atomic<int> after{0};
  pool.for_each(10, [&](std::size_t, std::size_t) { ++after; });  // still usable
  EXPECT_EQ(after.load(), 10);
}

TEST(MultimodalImageSet, ParseSizes) {
  using P = std::pair<std::uint32_t, std::uint32_t>;
  EXPECT_EQ(parse_sizes("224,1280x720,16X9"), (std::vector<P>{{224, 224}, {1280, 720}, {16, 9}}));
  for (const char* bad : {"", "224,", "0", "abc", "224x", "x224", "20000", "16384x16385", "224,224", "12x12x12", "-5"})
    EXPECT_THROW(parse_sizes(bad), usage_error) << bad;
  try {
    parse_sizes("224,1o24");
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("'1o24'"), std::string::npos) << e.what();
  }
}

TEST(MultimodalImageSet, GeneratedSetIsDeterministicAndDescribedByItsManifest) {
  temp_dir a, b;
  const auto spec = small_spec();
  const auto sa = write_image_set(a.path() / "set", spec);
  auto spec_b = spec;
  spec_b.threads = 1;  // thread count does not change a byte
  write_image_set(b.path() / "set", spec_b);
  EXPECT_EQ(sa.images, 3u * 2u * 2u);
  EXPECT_EQ(sa.requests, 20u);
  for (const auto& entry : fs::recursive_directory_iterator(a.path() / "set")) {
    if (!entry.is_regular_file()) continue;
    const auto rel = fs::relative(entry.path(), a.path());
    EXPECT_EQ(read_bytes(entry.path()), read_bytes(b.path() / rel)) << rel;
  }
  const auto m = nlohmann::json::parse(read_bytes(a.path() / "set" / "manifest.json"));
  EXPECT_EQ(m["format"], "itera.images/1");
  ASSERT_EQ(m["images"].size(), 12u);
  // order: size, then copy, then format; JPEG and PNG of one (size, copy) hold the same pixels
  EXPECT_EQ(m["images"][0]["format"], "jpeg");
  EXPECT_EQ(m["images"][1]["format"], "png");
  EXPECT_EQ(m["images"][4]["width"], 96);
  EXPECT_EQ(m["images"][4]["height"], 48);
  const auto set = list_images(a.path() / "set");
  EXPECT_TRUE(set.from_manifest);
  ASSERT_EQ(set.entries.size(), 12u);
  thread_pool pool(2);
  const auto read = read_images(set, &pool);
  EXPECT_TRUE(read.errors.empty());
  const auto decoded = decode_images(read, pool);
  EXPECT_EQ(decoded.good, 12u);
  EXPECT_EQ(decoded.bad, 0u);
  for (std::size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(decoded.images[i].width, m["images"][i]["width"].get<std::uint32_t>()) << i;
    EXPECT_EQ(decoded.images[i].height, m["images"][i]["height"].get<std::uint32_t>()) << i;
    EXPECT_EQ(read.bytes[i].size(), m["images"][i]["bytes"].get<std::size_t>()) << i;
    EXPECT_EQ(fnv1a64_hex(read.bytes[i].data(), read.bytes[i].size()), m["images"][i]["fnv1a64"]) << i;
    EXPECT_GT(decoded.decode_ns[i], 0);
  }
  // the PNG is the exact pixels; the JPEG of the same content is close to them
  EXPECT_GT(test::psnr(decoded.images[0], decoded.images[1]), 30.0);
  EXPECT_EQ(decoded.images[1].pixels, synthesize_photo(splitmix64(11 ^ splitmix64(0)), 64, 64).pixels);
  // a different seed gives different images
  temp_dir c;
  auto spec_c = spec;
  spec_c.seed = 12;
  write_image_set(c.path() / "set", spec_c);
  EXPECT_NE(read_bytes(a.path() / "set" / set.entries[1].relative_path),
            read_bytes(c.path() / "set" / set.entries[1].relative_path));
}

TEST(MultimodalImageSet, RefusesToWriteOverFilesAndBadSpecs) {
  temp_dir t;
  write_bytes(t.path() / "keep.txt", {'x'});
  try {
    write_image_set(t.path(), small_spec());
    FAIL() << "wrote into a non-empty folder";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("is not empty"), std::string::npos);
  }
  EXPECT_EQ(read_bytes(t.path() / "keep.txt"), std::vector<std::uint8_t>{'x'});
  EXPECT_THROW(write_image_set(t.path() / "keep.txt", small_spec()), usage_error);  // a file
  auto spec = small_spec();
  spec.count = 0;
  EXPECT_THROW(write_image_set(t.path() / "new1", spec), usage_error);
  spec = small_spec();
  spec.jpeg_quality = 0;
  EXPECT_THROW(write_image_set(t.path() / "new2", spec), usage_error);
  spec = small_spec();
  spec.formats = {image_format::gif};
  EXPECT_THROW(write_image_set(t.path() / "new3", spec), usage_error);
  spec = small_spec();
  spec.sizes.clear();
  EXPECT_THROW(write_image_set(t.path() / "new4", spec), usage_error);
  // an existing empty folder is fine
  fs::create_directory(t.path() / "empty");
  spec = small_spec();
  spec.sizes = {{16, 16}};
  spec.count = 1;
  EXPECT_EQ(write_image_set(t.path() / "empty", spec).images, 2u);
}

TEST(MultimodalLoader, BadImagesAreErrorsByIndexAndTheOthersDecode) {
  temp_dir t;
  const auto img = synthesize_photo(3, 120, 80);
  const auto jpeg = encode_jpeg(img, 90);
  const auto png = encode_png(img);
  auto truncated = jpeg;
  truncated.resize(jpeg.size() / 3);
  auto corrupt_png = png;
  corrupt_png[png.size() / 2] ^= 0x5A;
  auto huge = png;  // IHDR says 40000 wide; CRC left wrong, so libpng refuses it as corrupt
  huge[16] = 0;
  huge[17] = 0;
  huge[18] = 0x9C;
  huge[19] = 0x40;
  const std::string gif = "GIF89a\x10\x00\x10\x00\x80\x00\x00";
  // a user's folder (no manifest); names sort in this order: 0 good jpeg, 1 truncated, 2 zero bytes,
  // 3 good png, 4 gif, 5 corrupt png, 6 IHDR with a wrong CRC, 7 a good png in a subfolder
  write_bytes(t.path() / "a_good.jpg", jpeg);
  write_bytes(t.path() / "b_truncated.jpg", truncated);
  write_bytes(t.path() / "c_empty.png", {});
  write_bytes(t.path() / "d_good.png", png);
  write_bytes(t.path() / "e_anim.gif", {gif.begin(), gif.end()});
  write_bytes(t.path() / "f_corrupt.png", corrupt_png);
  write_bytes(t.path() / "g_huge.png", huge);
  write_bytes(t.path() / "sub" / "h_good.PNG", png);
  write_bytes(t.path() / "notes.txt", {'h', 'i'});              // not an image: left out, counted
  write_bytes(t.path() / ".hidden" / "x.jpg", jpeg);            // hidden: left out
  write_bytes(t.path() / ".y.jpg", jpeg);
  const auto set = list_images(t.path());
  EXPECT_FALSE(set.from_manifest);
  EXPECT_EQ(set.skipped_files, 1u);
  ASSERT_EQ(set.entries.size(), 8u);
  EXPECT_EQ(set.entries[7].relative_path, "sub/h_good.PNG");

  thread_pool pool(2);
  const auto read = read_images(set, &pool);
  EXPECT_TRUE(read.errors.empty());
  const auto decoded = decode_images(read, pool);
  EXPECT_EQ(decoded.good, 3u);
  EXPECT_EQ(decoded.bad, 5u);
  std::vector<std::size_t> bad;
  for (const auto& e : decoded.errors) {
    bad.push_back(e.index);
    EXPECT_EQ(e.stage, "decode");
    // R18: the reason never names the file
    for (const auto& entry : set.entries)
      EXPECT_EQ(e.reason.find(entry.path.filename().string()), std::string::npos) << e.reason;
  }
  EXPECT_EQ(bad, (std::vector<std::size_t>{1, 2, 4, 5, 6}));
  EXPECT_NE(decoded.errors[0].reason.find("Premature end"), std::string::npos) << decoded.errors[0].reason;
  EXPECT_NE(decoded.errors[1].reason.find("empty file"), std::string::npos);
  EXPECT_NE(decoded.errors[2].reason.find("unsupported format: gif"), std::string::npos);
  for (std::size_t i : {0u, 3u, 7u}) {
    EXPECT_TRUE(decoded.ok[i]);
    EXPECT_EQ(decoded.images[i].width, 120u);
    EXPECT_EQ(decoded.images[i].height, 80u);
  }
  EXPECT_EQ(decoded.images[3].pixels, img.pixels);
  EXPECT_EQ(decoded.output_bytes, 3u * 120 * 80 * 3);

  // absurd dimensions with a valid CRC: refused by the limit, with the dimensions in the message
  auto wide = png;
  wide[16] = 0;
  wide[17] = 0;
  wide[18] = 0x9C;
  wide[19] = 0x40;  // 40000
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 12; i < 29; ++i) {
    c ^= wide[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  c = ~c;
  for (int k = 0; k < 4; ++k) wide[29 + k] = static_cast<std::uint8_t>(c >> (24 - 8 * k));
  const auto mem = decode_images(from_memory({png, wide}), pool);
  ASSERT_EQ(mem.errors.size(), 1u);
  EXPECT_EQ(mem.errors[0].index, 1u);
  EXPECT_NE(mem.errors[0].reason.find("40000x80"), std::string::npos) << mem.errors[0].reason;
}

TEST(MultimodalLoader, MissingFileOfAManifestIsAReadErrorByIndex) {
  temp_dir t;
  auto spec = small_spec();
  spec.sizes = {{32, 32}};
  spec.count = 2;
  write_image_set(t.path() / "set", spec);
  const auto set = list_images(t.path() / "set");
  ASSERT_EQ(set.entries.size(), 4u);
  fs::remove(set.entries[2].path);
  thread_pool pool(2);
  const auto read = read_images(set, &pool);
  ASSERT_EQ(read.errors.size(), 1u);
  EXPECT_EQ(read.errors[0].index, 2u);
  EXPECT_EQ(read.errors[0].stage, "read");
  EXPECT_EQ(read.errors[0].reason.find("000002"), std::string::npos);  // no file name (R18)
  const auto decoded = decode_images(read, pool);
  EXPECT_EQ(decoded.good, 3u);
  EXPECT_EQ(decoded.bad, 1u);
  ASSERT_EQ(decoded.errors.size(), 1u);
  EXPECT_EQ(decoded.errors[0].stage, "read");
}

TEST(MultimodalImageSet, ListingRefusesWhatIsNotASetOfImages) {
  temp_dir t;
  EXPECT_THROW(list_images(t.path() / "nope"), input_error);
  EXPECT_THROW(list_images(t.path()), input_error);  // empty folder
  write_bytes(t.path() / "readme.md", {'#'});
  try {
    list_images(t.path());
    FAIL();
  } catch (const input_error& e) {
    EXPECT_NE(std::string(e.what()).find("holds no image file"), std::string::npos);
  }
  // an itera manifest that is malformed is an error naming it; another program's is ignored
  write_bytes(t.path() / "manifest.json", {'{', '}'});
  write_bytes(t.path() / "p.png", encode_png(test::make_image(4, 4, 1, 2, 3)));
  EXPECT_EQ(list_images(t.path()).entries.size(), 1u);
  const std::string bad = R"({"format": "itera.images/1", "images": [{"index": 0, "path": "../escape.png", "width": 4, "height": 4}]})";
  write_bytes(t.path() / "manifest.json", {bad.begin(), bad.end()});
  EXPECT_THROW(list_images(t.path()), input_error);
}

TEST(MultimodalRequests, MadeRequestsAreDeterministicAndInRange) {
  const auto a = make_requests(3, 200, 14, 4, 128, 64);
  EXPECT_EQ(a.size(), 200u);
  std::set<std::size_t> counts;
  for (const auto& r : a) {
    ASSERT_GE(r.images.size(), 1u);
    ASSERT_LE(r.images.size(), 4u);
    counts.insert(r.images.size());
    std::set<std::size_t> distinct(r.images.begin(), r.images.end());
    EXPECT_EQ(distinct.size(), r.images.size());
    for (auto i : r.images) EXPECT_LT(i, 14u);
    EXPECT_EQ(r.prompt_tokens, 128u);
    EXPECT_EQ(r.output_tokens, 64u);
  }
  EXPECT_EQ(counts.size(), 4u);  // 1, 2, 3 and 4 images all occur
  const auto b = make_requests(3, 200, 14, 4, 128, 64);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].images, b[i].images);
  EXPECT_EQ(make_requests(3, 5, 2, 10, 1, 1)[0].images.size() <= 2, true);  // capped by the set
}

TEST(MultimodalRequests, ParseGoodAndBadLines) {
  image_set set;
  for (std::size_t i = 0; i < 3; ++i) {
    image_entry e;
    e.index = i;
    e.relative_path = "photos/p" + std::to_string(i) + ".jpg";
    set.entries.push_back(e);
  }
  const std::string text =
      "{\"images\": [0, 2], \"prompt_tokens\": 10, \"output_tokens\": 5}\n"
      "\n"
      "{\"images\": [\"photos/p1.jpg\", 1], \"prompt_tokens\": 7, \"output_tokens\": 5}\r\n"
      "{\"images\": [3], \"prompt_tokens\": 7, \"output_tokens\": 5}\n"
      "{\"images\": [\"secret/name.jpg\"], \"prompt_tokens\": 7, \"output_tokens\": 5}\n"
      "{\"images\": [], \"prompt_tokens\": 7, \"output_tokens\": 5}\n"
      "{\"images\": [0], \"prompt_tokens\": 0, \"output_tokens\": 5}\n"
      "{\"images\": [0], \"prompt_tokens\": 3}\n"
      "{\"images\": [0], \"prompt_tokens\": 3, \"output_tokens\": 5, \"prompt\": \"hello\"}\n"
      "not json\n"
      "{\"images\": [0], \"prompt_tokens\": 3, \"output_tokens\": 5}";
  const auto r = parse_requests(text, set);
  ASSERT_EQ(r.requests.size(), 3u);
  EXPECT_EQ(r.requests[0].images, (std::vector<std::size_t>{0, 2}));
  EXPECT_EQ(r.requests[1].images, (std::vector<std::size_t>{1, 1}));
  EXPECT_EQ(r.requests[1].line, 3);
  EXPECT_EQ(r.requests[2].line, 11);
  ASSERT_EQ(r.errors.size(), 7u);
  std::vector<std::int64_t> lines;
  for (const auto& e : r.errors) {
    lines.push_back(e.line);
    EXPECT_EQ(e.message.find("secret"), std::string::npos) << e.message;  // never echoes the file's text
    EXPECT_EQ(e.message.find("hello"), std::string::npos) << e.message;
  }
  EXPECT_EQ(lines, (std::vector<std::int64_t>{4, 5, 6, 7, 8, 9, 10}));
  EXPECT_NE(r.errors[0].message.find("index 3, outside the set's 0..2"), std::string::npos) << r.errors[0].message;
  EXPECT_NE(r.errors[3].message.find("\"prompt_tokens\" must be a whole number"), std::string::npos);
  EXPECT_NE(r.errors[4].message.find("\"output_tokens\" is missing"), std::string::npos);
  // a generated set's requests file reads back whole
  temp_dir t;
  write_image_set(t.path() / "set", small_spec());
  const auto listed = list_images(t.path() / "set");
  const auto back = read_requests(t.path() / "set" / "requests.jsonl", listed);
  EXPECT_TRUE(back.errors.empty());
  EXPECT_EQ(back.requests.size(), 20u);
}

TEST(MultimodalDecodeBenchmark, ReportsEveryThreadCount) {
  EXPECT_EQ(default_thread_counts(1), (std::vector<std::size_t>{1}));
  EXPECT_EQ(default_thread_counts(2), (std::vector<std::size_t>{1, 2}));
  EXPECT_EQ(default_thread_counts(16), (std::vector<std::size_t>{1, 2, 4, 8, 16}));
  EXPECT_EQ(default_thread_counts(12), (std::vector<std::size_t>{1, 2, 4, 8, 12}));
  std::vector<std::vector<std::uint8_t>> files;
  std::uint64_t good_bytes = 0;
  for (std::uint32_t i = 0; i < 6; ++i) {
    const auto img = synthesize_photo(i, 64 + 16 * i, 48);
    files.push_back(i % 2 ? encode_png(img) : encode_jpeg(img, 90));
    good_bytes += files.back().size();
  }
  files.push_back({});  // one bad image
  const std::vector<std::size_t> counts{1, 2};
  const auto r = benchmark_decode(from_memory(files), counts, 2);
  EXPECT_EQ(r.images, 7u);
  EXPECT_EQ(r.good, 6u);
  EXPECT_EQ(r.bad, 1u);
  EXPECT_EQ(r.input_bytes, good_bytes);
  ASSERT_EQ(r.errors.size(), 1u);
  EXPECT_EQ(r.errors[0].index, 6u);
  ASSERT_EQ(r.points.size(), 2u);
  for (const auto& p : r.points) {
    EXPECT_EQ(p.pass_ns.size(), 2u);
    EXPECT_GT(p.images_per_s, 0);
    EXPECT_NEAR(p.input_mb_per_s, good_bytes / (p.median_ns * 1e-9) / 1e6, 1e-6 * p.input_mb_per_s);
    EXPECT_GT(p.megapixels_per_s, 0);
  }
  EXPECT_DOUBLE_EQ(r.points[0].speedup, 1.0);
  EXPECT_THROW(benchmark_decode(from_memory(files), std::vector<std::size_t>{}, 1), usage_error);
  EXPECT_THROW(benchmark_decode(from_memory(files), std::vector<std::size_t>{0}, 1), usage_error);
  EXPECT_THROW(benchmark_decode(from_memory(files), counts, 0), usage_error);
}

}  // namespace
}  // namespace itera::mm

#include "workloads/multimodal/context.hpp"

#include <fmt/format.h>

#include "itera/core/errors.hpp"
#include "workloads/multimodal/synth.hpp"

namespace itera::mm {

prepared_context prepare_context(const context_shape& shape, std::int64_t count, std::int64_t vocab,
                                 std::uint64_t seed, std::int64_t max_context) {
  const auto positive = [](std::int64_t v, const char* what) {
    if (v < 1) throw usage_error(fmt::format("context preparation: {} is {}; it must be at least 1", what, v));
  };
  positive(shape.prompt_tokens, "prompt_tokens");
  positive(shape.images, "images per request");
  positive(shape.tokens_per_image, "tokens per image");
  positive(count, "the number of prompts");
  if (shape.prefix < 0)
    throw usage_error(fmt::format("context preparation: the text prefix is {} tokens; give 0 or more", shape.prefix));
  if (vocab < 2)
    throw usage_error(fmt::format("context preparation: a vocabulary of {} ids leaves none for text (id {} marks "
                                  "image rows); the language model needs at least 2",
                                  vocab, image_placeholder_id));
  if (shape.length() > max_context)
    throw usage_error(fmt::format("context preparation: {} text tokens + {} images x {} tokens = {} tokens, longer "
                                  "than the language model's context of {}: fewer images or a shorter prompt",
                                  shape.prompt_tokens, shape.images, shape.tokens_per_image, shape.length(),
                                  max_context));
  prepared_context out;
  out.shape = shape;
  out.count = count;
  const std::int64_t length = shape.length(), before = shape.text_before();
  const std::int64_t image_span = shape.images * shape.tokens_per_image;
  out.ids.resize(static_cast<std::size_t>(count * length));
  out.image_rows.reserve(static_cast<std::size_t>(count * image_span));
  const auto text_ids = static_cast<std::uint64_t>(vocab - 1);
  for (std::int64_t i = 0; i < count; ++i) {
    std::uint64_t state = splitmix64(seed ^ 0xC0DE7E57ull) ^ splitmix64(static_cast<std::uint64_t>(i));
    std::int32_t* ids = out.ids.data() + i * length;
    for (std::int64_t r = 0; r < length; ++r) {
      const bool image = r >= before && r < before + image_span;
      if (image) {
        ids[r] = image_placeholder_id;
        out.image_rows.push_back(i * length + r);
      } else {
        ids[r] = static_cast<std::int32_t>(1 + splitmix64(state++) % text_ids);
      }
    }
  }
  return out;
}

}  // namespace itera::mm

#pragma once
// Context preparation (stage 6 of the multimodal pipeline): a request's text prompt with its
// images' tokens merged in, in the form the language model's prefill takes (llm::engine:
// stage_prompts, then stage_embeddings for the image rows). The layout is LLaVA-1.5's, with the
// text as token counts rather than words:
//   [prefix text tokens] [image 1: T' tokens] ... [image n: T' tokens] [the rest of the text]
// where T' is the projector's tokens per image. Text ids are drawn from the vocabulary by a seed
// (the prompt's words are not the point of the measurement, R18); image rows hold the placeholder
// id and their input vectors are the projector's output rows, image by image in request order.
// Positions are the rows' indices in the sequence: the engine builds them from the lengths.
#include <cstdint>
#include <span>
#include <vector>

namespace itera::mm {

struct context_shape {
  std::int64_t prompt_tokens = 0;     // text tokens of the request, >= 1
  std::int64_t images = 0;            // images of the request, >= 1
  std::int64_t tokens_per_image = 0;  // T', >= 1
  std::int64_t prefix = 0;            // text tokens before the first image: min(this, prompt_tokens)
  std::int64_t length() const { return prompt_tokens + images * tokens_per_image; }
  std::int64_t text_before() const { return prefix < prompt_tokens ? prefix : prompt_tokens; }
};

// Prompts of one shape, stacked for one prefill: ids [count x length], and the rows holding image
// tokens (row r of prompt i is i * length + r), strictly increasing, in the order of the images'
// projector outputs (prompt by prompt, image by image, token by token).
struct prepared_context {
  context_shape shape;
  std::int64_t count = 0;
  std::vector<std::int32_t> ids;
  std::vector<std::int64_t> image_rows;
  std::int64_t length() const { return shape.length(); }
};

// The id image rows hold; the engine overwrites their embeddings. Text ids are drawn from
// [1, vocab), so a text row never holds it.
inline constexpr std::int32_t image_placeholder_id = 0;

// `count` prompts of `shape` over a vocabulary of `vocab` ids; prompt i's text from
// splitmix64(seed, i). usage_error for a count, a shape or a vocabulary (< 2) that cannot be used,
// naming the field, and for a context longer than `max_context` (with both numbers).
prepared_context prepare_context(const context_shape& shape, std::int64_t count, std::int64_t vocab,
                                 std::uint64_t seed, std::int64_t max_context);

}  // namespace itera::mm

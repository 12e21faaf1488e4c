// llm prompts: the JSON-lines prompts file (ids or lengths), an error per bad line that names the line
// and the values, synthetic ids, and the generations written back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "itera/core/errors.hpp"
#include "workloads/llm/prompts.hpp"

namespace itera::llm {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

prompt_limits limits() {
  prompt_limits l;
  l.vocab = 32768;
  l.max_context = 4096;
  l.default_output = 16;
  l.seed = 7;
  return l;
}

// The one error of a single-line text.
std::string only_error(std::string_view text, const prompt_limits& l = limits()) {
  const auto set = parse_prompts(text, l);
  EXPECT_TRUE(set.requests.empty()) << text;
  if (set.errors.size() != 1) {
    ADD_FAILURE() << "expected one error for " << text << ", got " << set.errors.size();
    return {};
  }
  EXPECT_EQ(set.errors[0].line, 1);
  EXPECT_THAT(set.errors[0].message, HasSubstr("line 1: "));
  return set.errors[0].message;
}

TEST(LlmPrompts, GoodLinesOfBothKinds) {
  const std::string text =
      "{\"tokens\": [1, 15043, 29871, 0, 32767], \"output_len\": 64}\n"
      "{\"prompt_len\": 100, \"output_len\": 8}\n";
  const auto set = parse_prompts(text, limits());
  EXPECT_TRUE(set.errors.empty());
  EXPECT_EQ(set.bytes, text.size());
  EXPECT_EQ(set.rejected_too_long, 0);
  ASSERT_EQ(set.requests.size(), 2u);
  EXPECT_EQ(set.requests[0].line, 1);
  EXPECT_EQ(set.requests[0].tokens, (std::vector<std::int32_t>{1, 15043, 29871, 0, 32767}));
  EXPECT_EQ(set.requests[0].output_tokens, 64);
  EXPECT_EQ(set.requests[1].line, 2);
  EXPECT_EQ(set.requests[1].tokens, synthetic_prompt(7, 2, 100, 32768));
  EXPECT_EQ(set.requests[1].output_tokens, 8);
}

TEST(LlmPrompts, OutputLenDefault) {
  const auto set = parse_prompts("{\"tokens\": [5]}\n{\"prompt_len\": 3}", limits());
  ASSERT_EQ(set.requests.size(), 2u);
  EXPECT_EQ(set.requests[0].output_tokens, 16);
  EXPECT_EQ(set.requests[1].output_tokens, 16);
  EXPECT_EQ(set.requests[1].tokens.size(), 3u);
}

TEST(LlmPrompts, NotJsonOrNotAnObject) {
  EXPECT_THAT(only_error("{\"prompt_len\": 5"), HasSubstr("not valid JSON"));
  EXPECT_THAT(only_error("hello there"), HasSubstr("not valid JSON"));
  EXPECT_THAT(only_error("[1, 2, 3]"), HasSubstr("is a list, not a JSON object"));
  EXPECT_THAT(only_error("42"), HasSubstr("is 42, not a JSON object"));
  EXPECT_THAT(only_error("{\"prompt_len\": 5} {\"prompt_len\": 6}"), HasSubstr("not valid JSON"));
}

TEST(LlmPrompts, MessagesCarryNoPromptText) {
  const auto not_json = only_error("secret words {");
  EXPECT_EQ(not_json.find("secret"), std::string::npos) << not_json;
  const auto string_token = only_error("{\"tokens\": [1, \"secret\"]}");
  EXPECT_EQ(string_token.find("secret"), std::string::npos) << string_token;
  EXPECT_THAT(string_token, HasSubstr("token at position 1 is a string, not an integer id"));
  const auto text_key = only_error("{\"text\": \"secret\"}");
  EXPECT_EQ(text_key.find("secret"), std::string::npos) << text_key;
  EXPECT_THAT(text_key, HasSubstr("unknown key \"text\""));
  EXPECT_THAT(text_key, HasSubstr("token ids, not text"));
}

TEST(LlmPrompts, UnknownKeyNamed) {
  const auto m = only_error("{\"promt_len\": 5}");
  EXPECT_THAT(m, HasSubstr("unknown key \"promt_len\""));
  EXPECT_THAT(m, HasSubstr("\"prompt_len\""));
  EXPECT_THAT(only_error("{\"prompt_len\": 5, \"outptu_len\": 3}"), HasSubstr("unknown key \"outptu_len\""));
}

TEST(LlmPrompts, BothOrNeither) {
  EXPECT_THAT(only_error("{\"tokens\": [1], \"prompt_len\": 1}"), HasSubstr("both \"tokens\" and \"prompt_len\""));
  EXPECT_THAT(only_error("{\"output_len\": 4}"), HasSubstr("neither \"tokens\" nor \"prompt_len\""));
  EXPECT_THAT(only_error("{}"), HasSubstr("neither"));
}

TEST(LlmPrompts, BadTokens) {
  EXPECT_THAT(only_error("{\"tokens\": []}"), HasSubstr("\"tokens\" is an empty list"));
  EXPECT_THAT(only_error("{\"tokens\": 5}"), HasSubstr("\"tokens\" must be a list of integer ids, found 5"));
  EXPECT_THAT(only_error("{\"tokens\": [1, 2.5]}"), HasSubstr("token at position 1 is 2.5, not an integer id"));
  EXPECT_THAT(only_error("{\"tokens\": [null]}"), HasSubstr("token at position 0 is null"));
  EXPECT_THAT(only_error("{\"tokens\": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 70000]}"),
              HasSubstr("line 1: token 70000 at position 12 is outside the vocabulary 0..32767"));
  EXPECT_THAT(only_error("{\"tokens\": [-1]}"), HasSubstr("token -1 at position 0 is outside the vocabulary 0..32767"));
  EXPECT_THAT(only_error("{\"tokens\": [32768]}"), HasSubstr("token 32768 at position 0 is outside"));
  EXPECT_THAT(only_error("{\"tokens\": [18446744073709551615]}"),
              HasSubstr("token 18446744073709551615 at position 0 is outside"));
}

TEST(LlmPrompts, BadLengths) {
  EXPECT_THAT(only_error("{\"prompt_len\": 0}"), HasSubstr("\"prompt_len\" is 0 (give a length of at least 1)"));
  EXPECT_THAT(only_error("{\"prompt_len\": -3}"), HasSubstr("\"prompt_len\" is -3"));
  EXPECT_THAT(only_error("{\"prompt_len\": 4, \"output_len\": 0}"), HasSubstr("\"output_len\" is 0"));
  EXPECT_THAT(only_error("{\"prompt_len\": 1.5}"), HasSubstr("\"prompt_len\" must be a whole number >= 1, found 1.5"));
  EXPECT_THAT(only_error("{\"prompt_len\": \"12\"}"), HasSubstr("found a string"));
  EXPECT_THAT(only_error("{\"tokens\": [1], \"output_len\": true}"),
              HasSubstr("\"output_len\" must be a whole number"));
  EXPECT_THAT(only_error("{\"prompt_len\": 18446744073709551615}"), HasSubstr("beyond any context"));
}

TEST(LlmPrompts, ErrorsCarryTheirLineAndGoodLinesStillRun) {
  const std::string text =
      "{\"prompt_len\": 4}\n"
      "\n"
      "not json\n"
      "{\"tokens\": [1, 2]}\n"
      "{\"tokens\": [99999]}\n";
  const auto set = parse_prompts(text, limits());
  ASSERT_EQ(set.requests.size(), 2u);
  EXPECT_EQ(set.requests[0].line, 1);
  EXPECT_EQ(set.requests[1].line, 4);
  ASSERT_EQ(set.errors.size(), 2u);
  EXPECT_EQ(set.errors[0].line, 3);
  EXPECT_THAT(set.errors[0].message, HasSubstr("line 3: not valid JSON"));
  EXPECT_EQ(set.errors[1].line, 5);
  EXPECT_THAT(set.errors[1].message, HasSubstr("line 5: token 99999 at position 0"));
  EXPECT_EQ(set.rejected_too_long, 0);
}

TEST(LlmPrompts, BlankLinesAndCrlf) {
  const std::string text =
      "\xEF\xBB\xBF{\"tokens\": [3]}\r\n  \t \r\n\r\n\n{\"prompt_len\": 2, \"output_len\": 1}\r\n  ";
  const auto set = parse_prompts(text, limits());
  EXPECT_TRUE(set.errors.empty()) << set.errors[0].message;
  ASSERT_EQ(set.requests.size(), 2u);
  EXPECT_EQ(set.requests[0].line, 1);
  EXPECT_EQ(set.requests[0].tokens, std::vector<std::int32_t>{3});
  EXPECT_EQ(set.requests[1].line, 5);
  EXPECT_EQ(set.requests[1].output_tokens, 1);
  EXPECT_EQ(set.bytes, text.size());

  const auto last = parse_prompts("\n{\"prompt_len\": 2}", limits());  // no final newline
  ASSERT_EQ(last.requests.size(), 1u);
  EXPECT_EQ(last.requests[0].line, 2);

  const auto bad_crlf = parse_prompts("{\"prompt_len\": 2}\r\n{\"prompt_len\": 0}\r\n", limits());
  ASSERT_EQ(bad_crlf.errors.size(), 1u);
  EXPECT_EQ(bad_crlf.errors[0].line, 2);

  const auto empty = parse_prompts("", limits());
  EXPECT_TRUE(empty.requests.empty());
  EXPECT_TRUE(empty.errors.empty());
  EXPECT_EQ(empty.bytes, 0u);
}

TEST(LlmPrompts, TooLongCounted) {
  auto l = limits();
  l.default_output = 128;
  std::string text;
  for (int i = 0; i < 8; ++i) text += "{\"prompt_len\": 10}\n";
  text += "{\"prompt_len\": 9000}\n";                          // line 9
  text += "{\"prompt_len\": 3968}\n";                          // exactly the context: fine
  text += "{\"prompt_len\": 3969}\n";                          // one over
  text += "{\"prompt_len\": 5, \"output_len\": 5000}\n";       // the output alone
  text += "{\"prompt_len\": 9223372036854775807, \"output_len\": 9223372036854775807}\n";
  text += "{\"prompt_len\": 0}\n";                             // an error, not too long
  const auto set = parse_prompts(text, l);
  EXPECT_EQ(set.requests.size(), 9u);
  ASSERT_EQ(set.errors.size(), 5u);
  EXPECT_EQ(set.rejected_too_long, 4);
  EXPECT_EQ(set.errors[0].message,
            "line 9: prompt of 9000 tokens + 128 output tokens = 9128 exceed the context of 4096 (shorten the prompt "
            "or raise --axis context)");
  EXPECT_EQ(set.requests.back().line, 10);
  EXPECT_EQ(set.requests.back().tokens.size(), 3968u);
  EXPECT_THAT(set.errors[1].message, HasSubstr("line 11: prompt of 3969 tokens + 128 output tokens = 4097 exceed"));
  EXPECT_THAT(set.errors[2].message, HasSubstr("line 12: prompt of 5 tokens + 5000 output tokens = 5005"));
  EXPECT_THAT(set.errors[2].message, HasSubstr("lower output_len"));
  EXPECT_THAT(set.errors[3].message, HasSubstr("= 18446744073709551614 exceed"));

  std::string long_ids = "{\"tokens\": [1";
  for (int i = 1; i < 4096; ++i) long_ids += ", 1";
  long_ids += "]}";
  const auto ids = parse_prompts(long_ids, l);
  EXPECT_EQ(ids.rejected_too_long, 1);
  ASSERT_EQ(ids.errors.size(), 1u);
  EXPECT_THAT(ids.errors[0].message, HasSubstr("prompt of 4096 tokens + 128 output tokens = 4224"));
}

TEST(LlmPrompts, LimitsChecked) {
  auto l = limits();
  l.vocab = 0;
  EXPECT_THROW(parse_prompts("", l), usage_error);
  l = limits();
  l.max_context = 0;
  EXPECT_THROW(parse_prompts("", l), usage_error);
  l = limits();
  l.default_output = -1;
  EXPECT_THROW(parse_prompts("", l), usage_error);
}

TEST(LlmPrompts, SyntheticDeterministicAndInRange) {
  const auto a = synthetic_prompt(1, 3, 5000, 32000);
  EXPECT_EQ(a, synthetic_prompt(1, 3, 5000, 32000));
  EXPECT_NE(a, synthetic_prompt(2, 3, 5000, 32000)) << "the seed must matter";
  EXPECT_NE(a, synthetic_prompt(1, 4, 5000, 32000)) << "the line must matter";
  const auto prefix = synthetic_prompt(1, 3, 100, 32000);
  EXPECT_TRUE(std::equal(prefix.begin(), prefix.end(), a.begin())) << "a pure function of the position";
  std::vector<bool> seen(32000, false);
  std::size_t distinct = 0;
  for (const auto id : a) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 32000);
    if (!seen[static_cast<std::size_t>(id)]) ++distinct;
    seen[static_cast<std::size_t>(id)] = true;
  }
  EXPECT_GT(distinct, 4000u) << "ids should spread over the vocabulary";
  for (const auto id : synthetic_prompt(9, 1, 64, 1)) EXPECT_EQ(id, 0);
  for (const auto id : synthetic_prompt(9, 1, 1000, std::int64_t{1} << 31)) EXPECT_GE(id, 0);
  EXPECT_TRUE(synthetic_prompt(1, 1, 0, 10).empty());
  EXPECT_THROW(synthetic_prompt(1, 1, 4, 0), usage_error);
  EXPECT_THROW(synthetic_prompt(1, 1, -1, 10), usage_error);
}

class LlmPromptsFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    m_dir = fs::temp_directory_path() / ("itera_llm_prompts_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(m_dir);
    fs::create_directories(m_dir);
  }
  void TearDown() override { fs::remove_all(m_dir); }
  fs::path m_dir;
};

TEST_F(LlmPromptsFiles, ReadPromptsFromFile) {
  const std::string text = "{\"tokens\": [1, 2, 3]}\r\n\r\n{\"prompt_len\": 7, \"output_len\": 2}\n{\"tokens\": 1}";
  const auto path = m_dir / "prompts.jsonl";
  std::ofstream(path, std::ios::binary) << text;
  const auto set = read_prompts(path, limits());
  EXPECT_EQ(set.bytes, text.size());
  ASSERT_EQ(set.requests.size(), 2u);
  EXPECT_EQ(set.requests[0].tokens, (std::vector<std::int32_t>{1, 2, 3}));
  EXPECT_EQ(set.requests[1].line, 3);
  EXPECT_EQ(set.requests[1].tokens, synthetic_prompt(7, 3, 7, 32768));
  ASSERT_EQ(set.errors.size(), 1u);
  EXPECT_EQ(set.errors[0].line, 4);

  const auto empty_path = m_dir / "empty.jsonl";
  std::ofstream(empty_path, std::ios::binary).flush();
  const auto empty = read_prompts(empty_path, limits());
  EXPECT_TRUE(empty.requests.empty());
  EXPECT_TRUE(empty.errors.empty());
}

TEST_F(LlmPromptsFiles, UnreadablePathNamed) {
  const auto missing = m_dir / "no_such_prompts.jsonl";
  try {
    read_prompts(missing, limits());
    FAIL() << "no error for a missing file";
  } catch (const input_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(missing.string()));
  }
  try {
    read_prompts(m_dir, limits());
    FAIL() << "no error for a folder";
  } catch (const input_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(m_dir.string()));
  }
}

TEST_F(LlmPromptsFiles, WriteTextFileFailsNamed) {
  const auto path = m_dir / "missing_folder" / "out.jsonl";
  try {
    write_text_file(path, "x");
    FAIL() << "no error writing into a missing folder";
  } catch (const input_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path.string()));
  }
  EXPECT_THROW(write_text_file(m_dir, "x"), input_error);
  EXPECT_THROW(write_synthetic_prompts(path, 2, 3, 4), input_error);

  const auto ok = m_dir / "out.txt";
  write_text_file(ok, "long text that will be overwritten");
  write_text_file(ok, "short");
  std::ifstream in(ok, std::ios::binary);
  std::stringstream back;
  back << in.rdbuf();
  EXPECT_EQ(back.str(), "short");
}

TEST_F(LlmPromptsFiles, SyntheticFileReadsBack) {
  const auto path = m_dir / "synthetic.jsonl";
  write_text_file(path, "stale contents that must go\n");
  write_synthetic_prompts(path, 25, 300, 40);
  const auto set = read_prompts(path, limits());
  EXPECT_TRUE(set.errors.empty());
  ASSERT_EQ(set.requests.size(), 25u);
  for (std::size_t i = 0; i < set.requests.size(); ++i) {
    const auto& r = set.requests[i];
    EXPECT_EQ(r.line, static_cast<std::int64_t>(i + 1));
    EXPECT_EQ(r.tokens.size(), 300u);
    EXPECT_EQ(r.output_tokens, 40);
  }
  EXPECT_NE(set.requests[0].tokens, set.requests[1].tokens) << "each line its own ids";

  write_synthetic_prompts(path, 0, 1, 1);
  EXPECT_EQ(fs::file_size(path), 0u);
  EXPECT_THROW(write_synthetic_prompts(path, -1, 1, 1), usage_error);
  EXPECT_THROW(write_synthetic_prompts(path, 1, 0, 1), usage_error);
  EXPECT_THROW(write_synthetic_prompts(path, 1, 1, 0), usage_error);
}

TEST(LlmPrompts, FormatGenerationsRoundTrip) {
  std::vector<prompt_request> requests(3);
  requests[0].line = 1;
  requests[0].tokens = {5, 6, 7};
  requests[1].line = 4;
  requests[1].tokens = {1};
  requests[2].line = 9;
  requests[2].tokens = {2, 3};
  const std::vector<std::vector<std::int32_t>> generated = {{10, 11, 2147483647}, {}, {0}};
  const auto text = format_generations(requests, generated);
  std::istringstream in(text);
  std::string line;
  std::size_t i = 0;
  while (std::getline(in, line)) {
    ASSERT_LT(i, requests.size());
    const auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j.size(), 3u);
    EXPECT_EQ(j.at("line").get<std::int64_t>(), requests[i].line);
    EXPECT_EQ(j.at("prompt_tokens").get<std::size_t>(), requests[i].tokens.size());
    EXPECT_EQ(j.at("tokens").get<std::vector<std::int32_t>>(), generated[i]);
    ++i;
  }
  EXPECT_EQ(i, requests.size());
  EXPECT_TRUE(text.ends_with('\n'));
  EXPECT_EQ(format_generations({}, {}), "");
  EXPECT_THROW(format_generations(requests, std::span(generated).first(2)), std::invalid_argument);
}

}  // namespace
}  // namespace itera::llm

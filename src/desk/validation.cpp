// Field rules shared by the order form and the JSON API.
#include "itera/desk/validation.hpp"

#include <set>

#include <fmt/format.h>

#include "itera/desk/config.hpp"
#include "itera/desk/money.hpp"

namespace itera::desk {

namespace {

bool ascii_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); }

bool all_of(std::string_view s, bool (*ok)(char)) {
  for (char c : s) {
    if (!ok(c)) return false;
  }
  return true;
}

// Decodes one UTF-8 sequence at s[i]; returns the code point and advances i, or -1 when malformed
// (overlong forms, surrogates and values past U+10FFFF are malformed).
long next_code_point(std::string_view s, std::size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int n = 0;
  long cp = 0;
  long min = 0;
  if ((b0 & 0xE0) == 0xC0) { n = 1; cp = b0 & 0x1F; min = 0x80; }
  else if ((b0 & 0xF0) == 0xE0) { n = 2; cp = b0 & 0x0F; min = 0x800; }
  else if ((b0 & 0xF8) == 0xF0) { n = 3; cp = b0 & 0x07; min = 0x10000; }
  else return -1;
  if (i + static_cast<std::size_t>(n) >= s.size()) return -1;  // truncated sequence
  for (int k = 1; k <= n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + static_cast<std::size_t>(k)]);
    if ((b & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  i += static_cast<std::size_t>(n) + 1;
  return cp;
}

}  // namespace

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    if (next_code_point(s, i) < 0) return false;
  }
  return true;
}

bool plain_text(std::string_view s) {
  if (!s.empty() && (s.front() == ' ' || s.back() == ' ')) return false;
  std::size_t i = 0;
  while (i < s.size()) {
    const long cp = next_code_point(s, i);
    if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp <= 0x9F)) return false;  // controls (and malformed)
    if ((cp >= 0x202A && cp <= 0x202E) || (cp >= 0x2066 && cp <= 0x2069)) return false;  // bidi overrides
  }
  return true;
}

std::string check_email(std::string_view s) {
  if (s.empty()) return "Enter an email address, so that we can reach you about this order.";
  if (s.size() > 254) return "An email address has at most 254 characters.";
  if (!all_of(s, [](char c) { return c > 0x20 && c < 0x7F; })) {
    return "Use a plain ASCII address without spaces (name@example.com).";
  }
  const auto at = s.find('@');
  if (at == std::string_view::npos || s.find('@', at + 1) != std::string_view::npos) {
    return "An email address has exactly one @ (name@example.com).";
  }
  const auto local = s.substr(0, at);
  const auto domain = s.substr(at + 1);
  if (local.empty() || local.size() > 64) return "The part before the @ must have 1 to 64 characters.";
  if (!all_of(local, [](char c) { return ascii_alnum(c) || c == '.' || c == '_' || c == '%' || c == '+' || c == '-'; })) {
    return "Before the @ use letters, digits and . _ % + - only.";
  }
  if (local.front() == '.' || local.back() == '.' || local.find("..") != std::string_view::npos) {
    return "The part before the @ cannot start or end with a dot, or have two dots in a row.";
  }
  if (domain.size() > 253 || domain.find('.') == std::string_view::npos) {
    return "The part after the @ must be a domain name such as example.com.";
  }
  std::size_t start = 0;
  std::string_view last;
  while (start <= domain.size()) {
    const auto dot = domain.find('.', start);
    const auto label = domain.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-' ||
        !all_of(label, [](char c) { return ascii_alnum(c) || c == '-'; })) {
      return "The part after the @ must be a domain name such as example.com.";
    }
    last = label;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (last.size() < 2 || !all_of(last, [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); })) {
    return "The domain must end with a name such as .com or .vn.";
  }
  return {};
}

std::string check_messenger(std::string_view s) {
  if (s.empty()) return {};  // optional
  if (s.size() < 2 || s.size() > 64) return "A messenger handle has 2 to 64 characters.";
  if (!all_of(s, [](char c) { return ascii_alnum(c) || c == '@' || c == '_' || c == '.' || c == '+' || c == ':' || c == '-'; })) {
    return "Use letters, digits and @ _ . + : - only (for example telegram:@name).";
  }
  return {};
}

std::string check_environment(std::string_view s) {
  if (s.empty()) return "Say what to install (for example \"CUDA 12.4, PyTorch 2.5\"), or \"bare\".";
  if (s.size() > 200) return "At most 200 characters.";
  if (!plain_text(s)) return "Use printable text without control characters or leading/trailing spaces.";
  if (!all_of(s, [](char c) {
        return ascii_alnum(c) || c == ' ' || c == '.' || c == '_' || c == '-' || c == '+' || c == '/' || c == ',' ||
               c == ':' || c == '(' || c == ')' || c == '=' || c == '#';
      })) {
    return "Use letters, digits, spaces and . _ - + / , : ( ) = # only.";
  }
  return {};
}

std::string check_tx_id(std::string_view s) {
  if (s.empty()) return {};  // optional
  if (s.size() > 128) return "A transaction id has at most 128 characters.";
  if (!all_of(s, [](char c) { return ascii_alnum(c) || c == ':' || c == '_' || c == '-'; })) {
    return "A transaction id uses letters, digits and : _ - only.";
  }
  return {};
}

std::string check_note(std::string_view s) {
  if (s.size() > 500) return "A note has at most 500 characters.";
  if (!plain_text(s)) return "Use printable text without control characters or leading/trailing spaces.";
  return {};
}

std::optional<int> parse_bounded_int(std::string_view s, int lo, int hi) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  if (s.size() > 1 && s.front() == '0') return std::nullopt;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > hi) return std::nullopt;
  return v;
}

std::optional<order_input> validate_order(const order_form& form, const desk_config& config, const price_list& prices,
                                          field_errors& errors) {
  order_input o;
  if (form.gpu.empty()) errors["gpu"] = "Choose a GPU.";
  else if (!prices.price(form.gpu)) errors["gpu"] = "Choose a GPU from the list.";
  else o.gpu = form.gpu;

  if (const auto d = parse_bounded_int(form.days, 1, 30); !d || (*d != 3 && *d != 7 && *d != 30)) {
    errors["days"] = "Choose 3, 7 or 30 days.";
  } else {
    o.days = *d;
  }
  if (const auto q = parse_bounded_int(form.quantity, 1, config.limits.max_quantity); !q) {
    errors["quantity"] = fmt::format("Enter a whole number of GPUs from 1 to {}.", config.limits.max_quantity);
  } else {
    o.quantity = *q;
  }
  if (auto m = check_environment(form.environment); !m.empty()) errors["environment"] = m;
  else o.environment = form.environment;
  if (auto m = check_email(form.email); !m.empty()) errors["email"] = m;
  else o.email = form.email;
  if (auto m = check_messenger(form.messenger); !m.empty()) errors["messenger"] = m;
  else o.messenger = form.messenger;
  if (form.network.empty()) errors["network"] = "Choose how you will pay.";
  else if (!config.find_network(form.network)) errors["network"] = "Choose a payment network from the list.";
  else o.network = form.network;
  if (!errors.empty()) return std::nullopt;
  return o;
}

bool valid_submission_key(std::string_view s) {
  if (s.size() < 22 || s.size() > 128 || !all_of(s, [](char c) { return ascii_alnum(c) || c == '_' || c == '-'; })) return false;
  // Not a test of randomness (nothing can be), only of plain repetition: 22 random base64url
  // characters hold about 18 different ones, a UUID about 15.
  std::set<char> distinct(s.begin(), s.end());
  return distinct.size() >= 10;
}

bool valid_token(std::string_view s) {
  return s.size() == 43 && all_of(s, [](char c) { return ascii_alnum(c) || c == '_' || c == '-'; });
}

bool valid_reference(std::string_view s) {
  if (s.size() != 13 || s.substr(0, 3) != "IT-") return false;
  for (char c : s.substr(3)) {
    if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z')) || c == 'I' || c == 'L' || c == 'O' || c == 'U') return false;
  }
  return true;
}

}  // namespace itera::desk

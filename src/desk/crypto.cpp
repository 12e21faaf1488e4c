// libsodium: CSPRNG tokens, BLAKE2b, secretbox, argon2id, constant-time compare.
#include "itera/desk/crypto.hpp"

#include <stdexcept>

#include <sodium.h>

namespace itera::desk {

namespace {

const unsigned char* bytes_of(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }

std::string to_base64url(const unsigned char* raw, std::size_t size) {
  std::string out(sodium_base64_ENCODED_LEN(size, sodium_base64_VARIANT_URLSAFE_NO_PADDING), '\0');
  sodium_bin2base64(out.data(), out.size(), raw, size, sodium_base64_VARIANT_URLSAFE_NO_PADDING);
  out.pop_back();  // the terminating NUL
  return out;
}

std::string from_base64url(std::string_view text) {
  std::string out(text.size(), '\0');
  std::size_t len = 0;
  if (sodium_base642bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), text.data(), text.size(), nullptr, &len,
                        nullptr, sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0) {
    return {};
  }
  out.resize(len);
  return out;
}

}  // namespace

void crypto_init() {
  if (sodium_init() < 0) throw std::runtime_error("desk: libsodium could not start");
}

std::string random_token(std::size_t bytes) {
  std::string raw(bytes, '\0');
  randombytes_buf(raw.data(), raw.size());
  auto out = to_base64url(bytes_of(raw), raw.size());
  sodium_memzero(raw.data(), raw.size());
  return out;
}

std::string random_base32(std::size_t chars) {
  static constexpr char alphabet[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";  // Crockford: no I L O U
  std::string out(chars, '0');
  for (auto& c : out) c = alphabet[randombytes_uniform(32)];
  return out;
}

std::string to_hex(std::string_view bytes) {
  std::string out(bytes.size() * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), bytes_of(bytes), bytes.size());
  out.pop_back();
  return out;
}

std::string from_hex(std::string_view hex) {
  std::string out(hex.size() / 2, '\0');
  std::size_t len = 0;
  if (hex.size() % 2 != 0 ||
      sodium_hex2bin(reinterpret_cast<unsigned char*>(out.data()), out.size(), hex.data(), hex.size(), nullptr, &len, nullptr) != 0 ||
      len != out.size()) {
    return {};
  }
  return out;
}

std::string hash_raw(std::string_view message, std::string_view key) {
  if (!key.empty() && (key.size() < crypto_generichash_KEYBYTES_MIN || key.size() > crypto_generichash_KEYBYTES_MAX)) {
    throw std::invalid_argument("desk: hash key must be 16 to 64 bytes");
  }
  std::string out(32, '\0');
  crypto_generichash(reinterpret_cast<unsigned char*>(out.data()), out.size(), bytes_of(message), message.size(),
                     key.empty() ? nullptr : bytes_of(key), key.size());
  return out;
}

std::string hash_hex(std::string_view message, std::string_view key) { return to_hex(hash_raw(message, key)); }

std::string seal(std::string_view key, std::string_view plaintext) {
  static_assert(crypto_secretbox_KEYBYTES == 32);
  if (key.size() != crypto_secretbox_KEYBYTES) throw std::invalid_argument("desk: a sealing key is 32 bytes");
  std::string box(crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES + plaintext.size(), '\0');
  auto* nonce = reinterpret_cast<unsigned char*>(box.data());
  randombytes_buf(nonce, crypto_secretbox_NONCEBYTES);
  crypto_secretbox_easy(nonce + crypto_secretbox_NONCEBYTES, bytes_of(plaintext), plaintext.size(), nonce, bytes_of(key));
  return to_base64url(nonce, box.size());
}

std::optional<std::string> open_sealed(std::string_view key, std::string_view sealed) {
  if (key.size() != crypto_secretbox_KEYBYTES) return std::nullopt;
  const auto box = from_base64url(sealed);
  if (box.size() < crypto_secretbox_NONCEBYTES + crypto_secretbox_MACBYTES) return std::nullopt;
  const auto* nonce = bytes_of(box);
  const std::size_t cipher_size = box.size() - crypto_secretbox_NONCEBYTES;
  std::string plain(cipher_size - crypto_secretbox_MACBYTES, '\0');
  if (crypto_secretbox_open_easy(reinterpret_cast<unsigned char*>(plain.data()), nonce + crypto_secretbox_NONCEBYTES, cipher_size,
                                 nonce, bytes_of(key)) != 0) {
    return std::nullopt;
  }
  return plain;
}

std::string hash_password(std::string_view password) {
  char out[crypto_pwhash_STRBYTES];
  if (crypto_pwhash_str_alg(out, password.data(), password.size(), crypto_pwhash_OPSLIMIT_INTERACTIVE,
                            crypto_pwhash_MEMLIMIT_INTERACTIVE, crypto_pwhash_ALG_ARGON2ID13) != 0) {
    throw std::runtime_error("desk: out of memory while hashing the password");
  }
  return out;
}

bool verify_password(std::string_view hash, std::string_view password) {
  if (hash.empty() || hash.size() >= crypto_pwhash_STRBYTES) return false;
  const std::string h(hash);  // needs a NUL-terminated string
  return crypto_pwhash_str_verify(h.c_str(), password.data(), password.size()) == 0;
}

bool equal_constant_time(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return a.empty() || sodium_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace itera::desk

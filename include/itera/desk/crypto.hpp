#pragma once
// libsodium, behind the few calls the desk needs: random tokens from the OS CSPRNG, BLAKE2b hashes
// for tokens at rest, secretbox for the order link kept for idempotent retries, argon2id for the
// operator password, constant-time comparison.
#include <optional>
#include <string>
#include <string_view>

namespace itera::desk {

void crypto_init();  // sodium_init(); throws when libsodium cannot start
// `bytes` random bytes as unpadded base64url (32 bytes -> 43 characters).
std::string random_token(std::size_t bytes = 32);
// `chars` random characters of Crockford base32 (0-9, A-Z without I L O U).
std::string random_base32(std::size_t chars);
// BLAKE2b-256 of `message`, keyed when `key` is not empty (key: 16 to 64 bytes): 32 raw bytes, or hex.
std::string hash_raw(std::string_view message, std::string_view key = {});
std::string hash_hex(std::string_view message, std::string_view key = {});
// crypto_secretbox (XSalsa20-Poly1305) under a 32-byte key with a random nonce: base64url of nonce and
// box. open_sealed gives nullopt when the box was not made with that key or was altered.
std::string seal(std::string_view key, std::string_view plaintext);
std::optional<std::string> open_sealed(std::string_view key, std::string_view sealed);
std::string hash_password(std::string_view password);          // argon2id, interactive limits
bool verify_password(std::string_view hash, std::string_view password);
bool equal_constant_time(std::string_view a, std::string_view b);
std::string to_hex(std::string_view bytes);
std::string from_hex(std::string_view hex);  // empty when not hex

}  // namespace itera::desk

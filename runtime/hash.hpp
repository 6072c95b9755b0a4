// Content hashing for cache keys and integrity checks: XXH3 128-bit, printed as 32 lowercase
// hex characters (high 64 bits first, as XXH128_canonicalFromHash orders them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ftattn::runtime {

// SplitMix64's finaliser: a cheap, well-mixed 64-bit hash of one integer (config hashing,
// counter-based random numbers).
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// One-shot XXH3-128 of `data`.
std::string hash_hex(std::string_view data);

// Streaming XXH3-128: feeding the same bytes in any chunking gives hash_hex of their
// concatenation.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher& other);  // copies the state, so a common prefix can be hashed once
  Hasher& operator=(const Hasher& other);
  Hasher(Hasher&& other) noexcept;  // a moved-from Hasher may only be assigned or destroyed
  Hasher& operator=(Hasher&& other) noexcept;

  void update(std::string_view data);
  // Hashes a named field so that field boundaries are part of the hash: the name and value are
  // each prefixed with their length, hence ("ab", "c") and ("a", "bc") differ.
  void update_field(std::string_view name, std::string_view value);
  // Digest of everything fed so far; the Hasher can keep being updated afterwards.
  std::string hex_digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace ftattn::runtime

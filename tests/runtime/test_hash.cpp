#include <xxhash.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <string>

#include "runtime/hash.hpp"

using ftattn::runtime::hash_hex;
using ftattn::runtime::Hasher;

namespace {

// Independent formatting of the expected digest: high 64 bits, then low 64 bits.
std::string reference_hex(std::string_view data) {
  const XXH128_hash_t h = XXH3_128bits(data.data(), data.size());
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}

std::string random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (auto& c : out) c = static_cast<char>(rng() & 0xff);
  return out;
}

}  // namespace

TEST_CASE("hash_hex matches XXH3-128 computed directly", "[hash]") {
  CHECK(hash_hex("") == reference_hex(""));
  // Published XXH3-128 of the empty input, so a formatting slip on both sides is caught too.
  CHECK(hash_hex("") == "99aa06d3014798d86001c324468d497f");
  CHECK(hash_hex("ftattn") == reference_hex("ftattn"));
  const std::string blob = random_bytes(5000, 1);
  CHECK(hash_hex(blob) == reference_hex(blob));
  const std::string with_nuls("a\0b\0\0c", 6);
  CHECK(hash_hex(with_nuls) == reference_hex(with_nuls));
  CHECK(hash_hex(with_nuls) != hash_hex("abc"));
}

TEST_CASE("hash_hex is 32 lowercase hex characters", "[hash]") {
  for (const std::string& input : {std::string(), std::string("x"), random_bytes(300, 2)}) {
    const std::string h = hash_hex(input);
    REQUIRE(h.size() == 32);
    for (char c : h) CHECK(((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')));
  }
}

TEST_CASE("Hasher streaming equals one-shot for any chunking", "[hash]") {
  const std::string data = random_bytes(10000, 3);
  CHECK(Hasher().hex_digest() == hash_hex(""));
  for (std::size_t chunk : {1u, 7u, 64u, 255u, 4096u, 10000u}) {
    Hasher h;
    for (std::size_t off = 0; off < data.size(); off += chunk) h.update(data.substr(off, chunk));
    CHECK(h.hex_digest() == hash_hex(data));
  }
}

TEST_CASE("Hasher digest does not end the stream, copies fork it", "[hash]") {
  Hasher h;
  h.update("prefix-");
  const std::string mid = h.hex_digest();
  CHECK(mid == hash_hex("prefix-"));
  CHECK(h.hex_digest() == mid);  // digest is repeatable

  Hasher fork = h;
  h.update("one");
  fork.update("two");
  CHECK(h.hex_digest() == hash_hex("prefix-one"));
  CHECK(fork.hex_digest() == hash_hex("prefix-two"));

  Hasher moved = std::move(fork);
  moved.update("!");
  CHECK(moved.hex_digest() == hash_hex("prefix-two!"));
  fork = moved;  // assigning to a moved-from Hasher revives it
  CHECK(fork.hex_digest() == moved.hex_digest());
}

TEST_CASE("Hasher::update_field keeps field boundaries", "[hash]") {
  const auto fields = [](std::initializer_list<std::pair<std::string_view, std::string_view>> fs) {
    Hasher h;
    for (const auto& [name, value] : fs) h.update_field(name, value);
    return h.hex_digest();
  };
  CHECK(fields({{"ab", "c"}}) != fields({{"a", "bc"}}));
  CHECK(fields({{"", "x"}}) != fields({{"x", ""}}));
  CHECK(fields({{"a", "b"}, {"c", "d"}}) != fields({{"a", "bc"}, {"", "d"}}));
  CHECK(fields({{"a", "b"}, {"c", "d"}}) != fields({{"c", "d"}, {"a", "b"}}));
  // Not just plain concatenation.
  CHECK(fields({{"ab", "c"}}) != hash_hex("abc"));
  // Deterministic.
  CHECK(fields({{"arch", "sm_90a"}, {"nvrtc", "12.4"}}) ==
        fields({{"arch", "sm_90a"}, {"nvrtc", "12.4"}}));
  std::set<std::string> distinct;
  for (const auto& [n, v] :
       {std::pair{"", ""}, {"a", ""}, {"", "a"}, {"aa", ""}, {"a", "a"}, {"", "aa"}}) {
    distinct.insert(fields({{n, v}}));
  }
  CHECK(distinct.size() == 6);
}

#include "runtime/hash.hpp"

#include <xxhash.h>

#include <array>
#include <cstdint>
#include <new>

namespace ftattn::runtime {
namespace {

std::string to_hex(XXH128_hash_t h) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kDigits[(h.high64 >> (4 * i)) & 0xf];
    out[31 - i] = kDigits[(h.low64 >> (4 * i)) & 0xf];
  }
  return out;
}

// Fixed-width little-endian length, so the encoding does not depend on the host.
std::array<char, 8> le64(std::uint64_t v) {
  std::array<char, 8> out{};
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

}  // namespace

std::string hash_hex(std::string_view data) {
  return to_hex(XXH3_128bits(data.data(), data.size()));
}

struct Hasher::State {
  XXH3_state_t* xxh;
  State() : xxh(XXH3_createState()) {
    if (xxh == nullptr) throw std::bad_alloc();
  }
  ~State() { XXH3_freeState(xxh); }
  State(const State&) = delete;
  State& operator=(const State&) = delete;
};

Hasher::Hasher() : state_(std::make_unique<State>()) { XXH3_128bits_reset(state_->xxh); }

Hasher::~Hasher() = default;

Hasher::Hasher(const Hasher& other) : state_(std::make_unique<State>()) {
  XXH3_copyState(state_->xxh, other.state_->xxh);
}

Hasher& Hasher::operator=(const Hasher& other) {
  if (this != &other) {
    if (!state_) state_ = std::make_unique<State>();
    XXH3_copyState(state_->xxh, other.state_->xxh);
  }
  return *this;
}

Hasher::Hasher(Hasher&& other) noexcept = default;
Hasher& Hasher::operator=(Hasher&& other) noexcept = default;

void Hasher::update(std::string_view data) {
  XXH3_128bits_update(state_->xxh, data.data(), data.size());
}

void Hasher::update_field(std::string_view name, std::string_view value) {
  const auto name_len = le64(name.size());
  const auto value_len = le64(value.size());
  update({name_len.data(), name_len.size()});
  update(name);
  update({value_len.data(), value_len.size()});
  update(value);
}

std::string Hasher::hex_digest() const { return to_hex(XXH3_128bits_digest(state_->xxh)); }

}  // namespace ftattn::runtime

// When checksums encoded once may serve a later call (runtime/kv_checksums.hpp): which kernels
// may reuse them, what they are of, and the message that says what differs.
#include <catch2/catch.hpp>
#include <string>

#include "runtime/kv_checksums.hpp"
#include "tests/support/configs.hpp"

using namespace ftattn;

namespace {
const Arch kSm90a{90, true};

KernelConfig scheme(Precision precision, Protection protection, int block_n = 128) {
  return test::tile_config(128, 128, block_n, 8, 2, kSm90a, precision, Mask::none, protection);
}

// Distinct fake device addresses: the subject only compares them.
const void* at(std::uintptr_t a) { return reinterpret_cast<const void*>(a); }

}  // namespace

TEST_CASE("kv checksums: 16-bit checksum schemes may reuse them, the rest say why not",
          "[runtime]") {
  for (Precision p : {Precision::f16, Precision::bf16})
    for (Protection prot :
         {Protection::flash_abft, Protection::efta_detect, Protection::efta_correct})
      CHECK_NOTHROW(runtime::require_reusable_checksums(scheme(p, prot)));
  // f16_pasa checks V with Flash-ABFT (reusable) and the shifted keys with EFTA (not).
  CHECK_NOTHROW(
      runtime::require_reusable_checksums(scheme(Precision::f16_pasa, Protection::flash_abft)));
  REQUIRE_CONFIG_ERROR(
      runtime::require_reusable_checksums(scheme(Precision::f16_pasa, Protection::efta_detect)),
      "shifted keys");
  REQUIRE_CONFIG_ERROR(
      runtime::require_reusable_checksums(scheme(Precision::f16, Protection::none)), "unprotected");
  REQUIRE_CONFIG_ERROR(
      runtime::require_reusable_checksums(scheme(Precision::f16, Protection::decoupled)),
      "decoupled");
  for (Precision p : {Precision::int8, Precision::fp8_e4m3}) {
    REQUIRE_CONFIG_ERROR(runtime::require_reusable_checksums(scheme(p, Protection::flash_abft)),
                         "quantised");
    REQUIRE_CONFIG_ERROR(runtime::require_reusable_checksums(scheme(p, Protection::flash_abft)),
                         "ProtectOptions::checksums");
  }
}

TEST_CASE("kv checksums: the subject covers the tensors the scheme checks, and any change is named",
          "[runtime]") {
  const Problem pr = Problem::bhsd(2, 8, 4, 1000, 2048, 128);
  const KernelConfig abft = scheme(Precision::f16, Protection::flash_abft);
  const ChecksumSubject encoded = runtime::checksum_subject(abft, pr, at(0x1000), at(0x2000));
  // Flash-ABFT checks V only: K is not part of what it encoded.
  CHECK(encoded.k == nullptr);
  CHECK(encoded.v == at(0x2000));
  CHECK(encoded.seqlen_k == 2048);
  CHECK(encoded.heads_kv == 4);
  // The same call, or one that differs in what the prologue does not read, is served: another
  // K, another mask, other query rows and heads.
  CHECK_NOTHROW(runtime::require_same_subject(encoded, encoded));
  KernelConfig causal = abft;
  causal.mask = Mask::causal;
  const Problem fewer_queries = Problem::bhsd(2, 4, 4, 7, 2048, 128);
  CHECK_NOTHROW(runtime::require_same_subject(
      encoded, runtime::checksum_subject(causal, fewer_queries, at(0x9000), at(0x2000))));

  auto refused = [&](const ChecksumSubject& wanted, const std::string& what) {
    INFO(what);
    REQUIRE_CONFIG_ERROR(runtime::require_same_subject(encoded, wanted), what);
    REQUIRE_CONFIG_ERROR(runtime::require_same_subject(encoded, wanted), "encode_checksums");
  };
  refused(runtime::checksum_subject(abft, pr, at(0x1000), at(0x3000)), "V at");
  Problem longer = pr;
  longer.seqlen_k = 2049;
  refused(runtime::checksum_subject(abft, longer, at(0x1000), at(0x2000)),
          "seqlen_k 2048 (this call: 2049)");
  Problem strided = pr;
  strided.v.seq = 256;
  refused(runtime::checksum_subject(abft, strided, at(0x1000), at(0x2000)), "V strides");
  refused(runtime::checksum_subject(scheme(Precision::bf16, Protection::flash_abft), pr, at(0x1000),
                                    at(0x2000)),
          "precision f16 (this call: bf16)");
  refused(runtime::checksum_subject(scheme(Precision::f16, Protection::flash_abft, 64), pr,
                                    at(0x1000), at(0x2000)),
          "block_n 128 (this call: 64)");
  refused(runtime::checksum_subject(scheme(Precision::f16, Protection::efta_detect), pr, at(0x1000),
                                    at(0x2000)),
          "protection flash_abft (this call: efta_detect)");
  Problem other_heads = Problem::bhsd(2, 8, 8, 1000, 2048, 128);
  refused(runtime::checksum_subject(abft, other_heads, at(0x1000), at(0x2000)), "heads_kv 4");

  // EFTA checks scores too: K is part of its subject.
  const KernelConfig efta = scheme(Precision::f16, Protection::efta_correct);
  const ChecksumSubject with_k = runtime::checksum_subject(efta, pr, at(0x1000), at(0x2000));
  CHECK(with_k.k == at(0x1000));
  const ChecksumSubject other_k = runtime::checksum_subject(efta, pr, at(0x5000), at(0x2000));
  REQUIRE_CONFIG_ERROR(runtime::require_same_subject(with_k, other_k), "K at");
}

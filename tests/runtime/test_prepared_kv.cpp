// When K's and V's work prepared once may serve a later call (runtime/prepared_kv.hpp): which
// kernels have some, what it depends on, and the message that says what differs.
#include <catch2/catch.hpp>
#include <string>

#include "runtime/prepared_kv.hpp"
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

TEST_CASE("prepared kv: checksum schemes and f16_pasa have work to prepare, the rest say why not",
          "[runtime]") {
  for (Precision p : {Precision::f16, Precision::bf16, Precision::f16_pasa})
    for (Protection prot :
         {Protection::flash_abft, Protection::efta_detect, Protection::efta_correct})
      CHECK_NOTHROW(runtime::require_preparable(scheme(p, prot)));
  // Unprotected f16_pasa still shifts its keys on every call.
  CHECK_NOTHROW(runtime::require_preparable(scheme(Precision::f16_pasa, Protection::none)));
  for (Precision p : {Precision::f16, Precision::bf16})
    REQUIRE_CONFIG_ERROR(runtime::require_preparable(scheme(p, Protection::none)), "unprotected");
  REQUIRE_CONFIG_ERROR(runtime::require_preparable(scheme(Precision::f16, Protection::decoupled)),
                       "decoupled");
  for (Precision p : {Precision::int8, Precision::fp8_e4m3}) {
    REQUIRE_CONFIG_ERROR(runtime::require_preparable(scheme(p, Protection::flash_abft)),
                         "quantised");
    REQUIRE_CONFIG_ERROR(runtime::require_preparable(scheme(p, Protection::none)),
                         "launch_quantized");
    REQUIRE_CONFIG_ERROR(runtime::require_preparable(scheme(p, Protection::flash_abft)),
                         "ProtectOptions::prepared_kv");
  }
}

TEST_CASE("prepared kv: the subject covers what the work reads, and any change is named",
          "[runtime]") {
  const Problem pr = Problem::bhsd(2, 8, 4, 1000, 2048, 128);
  const KernelConfig abft = scheme(Precision::f16, Protection::flash_abft);
  const PreparedSubject prepared = runtime::prepared_subject(abft, pr, at(0x1000), at(0x2000));
  // Flash-ABFT checks V only: K is not part of what it prepared.
  CHECK(prepared.k == nullptr);
  CHECK(prepared.v == at(0x2000));
  CHECK(prepared.seqlen_k == 2048);
  CHECK(prepared.heads_kv == 4);
  // The same call, or one that differs in what the prologue does not read, is served: another
  // K, another mask, other query rows and heads.
  CHECK_NOTHROW(runtime::require_same_subject(prepared, prepared));
  KernelConfig causal = abft;
  causal.mask = Mask::causal;
  const Problem fewer_queries = Problem::bhsd(2, 4, 4, 7, 2048, 128);
  CHECK_NOTHROW(runtime::require_same_subject(
      prepared, runtime::prepared_subject(causal, fewer_queries, at(0x9000), at(0x2000))));

  auto refused = [&](const PreparedSubject& wanted, const std::string& what) {
    INFO(what);
    REQUIRE_CONFIG_ERROR(runtime::require_same_subject(prepared, wanted), what);
    REQUIRE_CONFIG_ERROR(runtime::require_same_subject(prepared, wanted), "prepare_kv");
  };
  refused(runtime::prepared_subject(abft, pr, at(0x1000), at(0x3000)), "V at");
  Problem longer = pr;
  longer.seqlen_k = 2049;
  refused(runtime::prepared_subject(abft, longer, at(0x1000), at(0x2000)),
          "seqlen_k 2048 (this call: 2049)");
  Problem strided = pr;
  strided.v.seq = 256;
  refused(runtime::prepared_subject(abft, strided, at(0x1000), at(0x2000)), "V strides");
  refused(runtime::prepared_subject(scheme(Precision::bf16, Protection::flash_abft), pr, at(0x1000),
                                    at(0x2000)),
          "precision f16 (this call: bf16)");
  refused(runtime::prepared_subject(scheme(Precision::f16, Protection::flash_abft, 64), pr,
                                    at(0x1000), at(0x2000)),
          "block_n 128 (this call: 64)");
  refused(runtime::prepared_subject(scheme(Precision::f16, Protection::efta_detect), pr, at(0x1000),
                                    at(0x2000)),
          "protection flash_abft (this call: efta_detect)");
  Problem other_heads = Problem::bhsd(2, 8, 8, 1000, 2048, 128);
  refused(runtime::prepared_subject(abft, other_heads, at(0x1000), at(0x2000)), "heads_kv 4");

  // EFTA checks scores too: K is part of its subject.
  const KernelConfig efta = scheme(Precision::f16, Protection::efta_correct);
  const PreparedSubject with_k = runtime::prepared_subject(efta, pr, at(0x1000), at(0x2000));
  CHECK(with_k.k == at(0x1000));
  const PreparedSubject other_k = runtime::prepared_subject(efta, pr, at(0x5000), at(0x2000));
  REQUIRE_CONFIG_ERROR(runtime::require_same_subject(with_k, other_k), "K at");

  // f16_pasa shifts K in the softmax's units: K and the scale are part of its subject, with or
  // without a checksum scheme, V only with one.
  const KernelConfig pasa = scheme(Precision::f16_pasa, Protection::none);
  const PreparedSubject shifted = runtime::prepared_subject(pasa, pr, at(0x1000), at(0x2000));
  CHECK(shifted.k == at(0x1000));
  CHECK(shifted.v == nullptr);
  CHECK(shifted.scale == pr.scale());
  Problem rescaled = pr;
  rescaled.softmax_scale = 0.5f;
  REQUIRE_CONFIG_ERROR(
      runtime::require_same_subject(
          shifted, runtime::prepared_subject(pasa, rescaled, at(0x1000), at(0x2000))),
      "softmax scale");
  const PreparedSubject pasa_abft = runtime::prepared_subject(
      scheme(Precision::f16_pasa, Protection::flash_abft), pr, at(0x1000), at(0x2000));
  CHECK(pasa_abft.k == at(0x1000));
  CHECK(pasa_abft.v == at(0x2000));
  REQUIRE_CONFIG_ERROR(runtime::require_same_subject(shifted, pasa_abft),
                       "protection none (this call: flash_abft)");
}

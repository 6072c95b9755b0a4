// SASS digests: the same machine code hashes the same whatever the addresses, encodings and
// spacing around it; one changed instruction, however deep in the function, changes its hash.
#include <catch2/catch.hpp>
#include <string>

#include "ftattn/sass_digest.hpp"

using namespace ftattn;

namespace {

// nvdisasm's layout: a section header, the function's label, address-tagged instructions and
// directives; `deep` is the instruction at 0x10000 (five hex digits).
std::string nvdisasm_text(const std::string& deep, const std::string& pad = "        ") {
  std::string t =
      "//--------------------- .text.first --------------------------\n"
      "\t.section\t.text.first,\"ax\",@progbits\n"
      ".text.first:\n" +
      pad + "/*0000*/                   LDC R1, c[0x0][0x28] ;\n" + pad +
      "/*0010*/                   FFMA R2, R3, R4, R5 ;\n" + pad +
      "/*fff0*/                   HMMA.16816.F32 R8, R12, R16, R8 ;\n" + pad + "/*10000*/ " + deep +
      " ;\n" +
      "        /*0000*/ \t.byte\t0x03, 0x61, 0x00\n"
      ".L_x_1:\n"
      "//--------------------- .text.second --------------------------\n"
      ".text.second:\n"
      "        /*0000*/                   EXIT ;\n";
  return t;
}

}  // namespace

TEST_CASE("digest_sass: one line per function, instructions counted past 0xffff",
          "[runtime][sass]") {
  const auto fs = digest_sass(nvdisasm_text("MOV R1, R2"));
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].name == "first");
  CHECK(fs[0].instructions == 4);  // the .byte directive is not one
  CHECK(fs[1].name == "second");
  CHECK(fs[1].instructions == 1);
  CHECK(fs[0].hash.size() == 32);
  CHECK(fs[0].hash != fs[1].hash);
}

TEST_CASE("digest_sass: addresses, encodings and spacing do not count, instructions do",
          "[runtime][sass]") {
  const auto base = digest_sass(nvdisasm_text("MOV R1, R2"));
  // Other indentation, and cuobjdump-style encodings after the semicolon.
  std::string noisy = nvdisasm_text("MOV  R1,   R2", "\t  ");
  for (std::size_t at = 0; (at = noisy.find(" ;\n", at)) != std::string::npos; at += 3)
    noisy.replace(at, 3, " ;   /* 0x000fe20000000800 */\n");
  const auto same = digest_sass(noisy);
  REQUIRE(same.size() == 2);
  CHECK(same[0].hash == base[0].hash);
  CHECK(same[1].hash == base[1].hash);
  // One register changed at 0x10000: a comparison over four-digit addresses would miss it.
  const auto changed = digest_sass(nvdisasm_text("MOV R1, R3"));
  REQUIRE(changed.size() == 2);
  CHECK(changed[0].hash != base[0].hash);
  CHECK(changed[1].hash == base[1].hash);
}

TEST_CASE("digest_sass reads cuobjdump's layout", "[runtime][sass]") {
  const std::string text =
      "\n\tcode for sm_90a\n"
      "\t\tFunction : ftattn_fwd_x\n"
      "\t.headerflags\t@\"EF_CUDA_SM90\"\n"
      "        /*0000*/                   LDC R1, c[0x0][0x28] ;      /* 0x00000a00ff017b82 */\n"
      "                                                                /* 0x000fe20000000800 */\n"
      "        /*0010*/               @P0 BRA 0x30 ;                  /* 0x0000000000000947 */\n"
      "\t\tFunction : checksums_ftattn_fwd_x\n"
      "        /*0000*/                   EXIT ;                      /* 0x000000000000794d */\n";
  const auto fs = digest_sass(text);
  REQUIRE(fs.size() == 2);
  CHECK(fs[0].name == "ftattn_fwd_x");
  CHECK(fs[0].instructions == 2);
  CHECK(fs[1].name == "checksums_ftattn_fwd_x");
  CHECK(fs[1].instructions == 1);
  CHECK(digest_sass("no functions here\n        /*0000*/ EXIT ;\n").empty());
}

// Block-sparse masks on the host side: names, validation of the mask layout, the generated
// kernel, and the mask's geometry.
#include <catch2/catch.hpp>

#include "ftattn/codegen.hpp"
#include "ftattn/errors.hpp"
#include "runtime/nvrtc_compiler.hpp"

using namespace ftattn;

namespace {

KernelConfig sparse_config(Mask m) {
  KernelConfig c;
  c.head_dim = 128;
  c.mask = m;
  c.arch = Arch{90, true};
  return with_defaults(c, c.arch);
}

}  // namespace

TEST_CASE("block-sparse masks name, parse and classify", "[codegen][sparse]") {
  CHECK(parse_mask("block_sparse") == Mask::block_sparse);
  CHECK(parse_mask("block-sparse-causal") == Mask::block_sparse_causal);
  CHECK(is_causal(Mask::block_sparse_causal));
  CHECK_FALSE(is_causal(Mask::block_sparse));
  CHECK(is_block_sparse(Mask::block_sparse_causal));
  CHECK_FALSE(is_block_sparse(Mask::causal));
  const KernelConfig c = sparse_config(Mask::block_sparse_causal);
  CHECK(c.name().find("_block-sparse-causal_none") != std::string::npos);
  CHECK(KernelConfig::parse(c.name()) == c);
  CHECK(c.symbol().find('-') == std::string::npos);
}

TEST_CASE("block-sparse problems are checked against the kernel's tiles", "[codegen][sparse]") {
  const KernelConfig c = sparse_config(Mask::block_sparse);  // 128 x 64 tiles
  Problem p = Problem::bhsd(1, 2, 2, 1000, 1000, 128);
  CHECK_THROWS_WITH(validate(p, c), Catch::Contains("sparse_block_m and sparse_block_n"));
  p.sparse_block_m = 128;
  p.sparse_block_n = 96;  // not a multiple of block_n 64
  CHECK_THROWS_WITH(validate(p, c), Catch::Contains("multiples of the kernel's tiles"));
  p.sparse_block_n = 128;
  CHECK_NOTHROW(validate(p, c));
  p.block_mask_head_stride = -2;
  CHECK_THROWS_AS(validate(p, c), ConfigError);

  // Mask sizes on a dense kernel are a mistake worth saying.
  Problem dense = Problem::bhsd(1, 2, 2, 1000, 1000, 128);
  dense.sparse_block_m = dense.sparse_block_n = 128;
  CHECK_THROWS_WITH(validate(dense, sparse_config(Mask::causal)),
                    Catch::Contains("use mask block_sparse"));
}

TEST_CASE("block mask geometry", "[codegen][sparse]") {
  Problem p = Problem::bhsd(1, 3, 3, 1000, 300, 64);
  p.sparse_block_m = 128;
  p.sparse_block_n = 64;
  CHECK(p.block_mask_q_blocks() == 8);  // ceil(1000 / 128)
  CHECK(p.block_mask_k_blocks() == 5);  // ceil(300 / 64)
  CHECK(p.block_mask_head_bytes() == 40);
  CHECK(p.block_mask_bytes() == 120);
  p.block_mask_head_stride = 0;  // one mask for every head
  CHECK(p.block_mask_bytes() == 40);
  p.block_mask_head_stride = 64;  // padded heads
  CHECK(p.block_mask_bytes() == 64 * 2 + 40);
}

TEST_CASE("block-sparse kernels compile and read the mask", "[codegen][nvrtc][sparse]") {
  for (Mask m : {Mask::block_sparse, Mask::block_sparse_causal})
    for (Arch arch : {Arch{80, false}, Arch{90, true}}) {
      KernelConfig c = sparse_config(m);
      c.arch = arch;
      const codegen::KernelSource src = codegen::generate(c);
      CHECK(src.text.find("/*block_sparse=*/true") != std::string::npos);
      CHECK(src.text.find(std::string("/*causal=*/") + (is_causal(m) ? "true" : "false")) !=
            std::string::npos);
      const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(src);
      // The mask is read with byte loads from global memory; the dense kernel has none.
      CHECK(out.ptx.find("ld.global.u8") != std::string::npos);
    }
  KernelConfig dense = sparse_config(Mask::causal);
  const runtime::NvrtcOutput out = runtime::compile_with_nvrtc(codegen::generate(dense));
  CHECK(out.ptx.find("ld.global.u8") == std::string::npos);
}

TEST_CASE("defaults pick tiles that divide the mask's blocks", "[codegen][sparse]") {
  KernelConfig open;
  open.head_dim = 64;  // the dense default is 128 x 128
  open.mask = Mask::block_sparse;
  open.arch = Arch{90, true};
  Problem p = Problem::bhsd(1, 2, 2, 1024, 1024, 64);
  p.sparse_block_m = 256;
  p.sparse_block_n = 192;
  const KernelConfig c = with_defaults(open, open.arch, &p);
  CHECK(p.sparse_block_m % c.block_m == 0);
  CHECK(p.sparse_block_n % c.block_n == 0);
  CHECK(c.block_n == 64);
  CHECK_NOTHROW(validate(p, c));
  // A user's tile is never changed: validate reports the clash instead.
  open.block_n = 128;
  CHECK_THROWS_AS(validate(p, with_defaults(open, open.arch, &p)), ConfigError);
}

// GPU tests: every supported config of the sm80 skeleton on several shapes, against the host
// reference in double precision. Run on the device machine: ./ftattn_gpu_tests
#include <algorithm>
#include <catch2/catch.hpp>

#include "ftattn/runtime.hpp"
#include "runtime/driver.hpp"
#include "tests/gpu/attention_case.hpp"

using namespace ftattn;

namespace {

Runtime& shared_runtime() {
  static Runtime rt;
  return rt;
}

KernelConfig config_for(int head_dim, Precision p, Mask m) {
  KernelConfig c;
  c.head_dim = head_dim;
  c.precision = p;
  c.mask = m;
  return c;
}

void expect_pass(const gpu_test::CaseResult& r) {
  INFO(r.config_name << ": " << r.report.summary());
  CHECK(r.report.passed);
  CHECK(r.report.rows_checked > 0);
}

}  // namespace

TEST_CASE("every head dim, precision and mask matches the reference", "[gpu]") {
  Runtime& rt = shared_runtime();
  REQUIRE(rt.has_device());
  for (int d : {32, 64, 96, 128, 192, 256})
    for (Precision p : {Precision::f16, Precision::bf16})
      for (Mask m : {Mask::none, Mask::causal}) {
        // Odd lengths on purpose: neither a multiple of block_m nor of block_n.
        const Problem pr = Problem::bhsd(2, 3, 3, 200, 200, d);
        expect_pass(gpu_test::run_case(rt, config_for(d, p, m), pr, true, 0, 1000 + d));
      }
}

TEST_CASE("odd and tiny sequence lengths", "[gpu]") {
  Runtime& rt = shared_runtime();
  for (auto [sq, sk] :
       std::vector<std::pair<int, int>>{{1, 1}, {1, 77}, {17, 5}, {63, 65}, {129, 128}, {255, 513}})
    for (Mask m : {Mask::none, Mask::causal}) {
      INFO("seqlen_q " << sq << " seqlen_k " << sk);
      const Problem pr = Problem::bhsd(1, 2, 2, sq, sk, 128);
      expect_pass(gpu_test::run_case(rt, config_for(128, Precision::f16, m), pr, true, 0, sq * sk));
    }
}

TEST_CASE("causal with seqlen_q != seqlen_k is aligned bottom-right", "[gpu]") {
  Runtime& rt = shared_runtime();
  // seqlen_q > seqlen_k leaves the first rows with no key at all: they must come out 0.
  for (auto [sq, sk] : std::vector<std::pair<int, int>>{{128, 384}, {300, 100}, {96, 1000}})
    for (Precision p : {Precision::f16, Precision::bf16}) {
      INFO("seqlen_q " << sq << " seqlen_k " << sk);
      const Problem pr = Problem::bhsd(2, 2, 2, sq, sk, 64);
      expect_pass(gpu_test::run_case(rt, config_for(64, p, Mask::causal), pr, true, 0, sq + sk));
    }
}

TEST_CASE("strided layouts, GQA and MQA", "[gpu]") {
  Runtime& rt = shared_runtime();
  SECTION("bshd") {
    const Problem pr = Problem::bshd(2, 4, 4, 333, 257, 128);
    expect_pass(
        gpu_test::run_case(rt, config_for(128, Precision::bf16, Mask::causal), pr, false, 0, 5));
  }
  SECTION("GQA 8 query heads over 2 kv heads") {
    const Problem pr = Problem::bhsd(2, 8, 2, 190, 190, 64);
    expect_pass(gpu_test::run_case(rt, config_for(64, Precision::f16, Mask::none), pr, true, 0, 6));
  }
  SECTION("MQA") {
    const Problem pr = Problem::bhsd(1, 6, 1, 130, 260, 128);
    expect_pass(
        gpu_test::run_case(rt, config_for(128, Precision::f16, Mask::causal), pr, true, 0, 7));
  }
  SECTION("padded rows: seq stride larger than head_dim") {
    Problem pr = Problem::bhsd(2, 2, 2, 100, 100, 64);
    for (Strides* s : {&pr.q, &pr.k, &pr.v, &pr.o}) {
      s->seq = 64 + 16;
      s->head = s->seq * 100;
      s->batch = s->head * 2;
    }
    expect_pass(
        gpu_test::run_case(rt, config_for(64, Precision::bf16, Mask::none), pr, true, 0, 8));
  }
  SECTION("softmax scale") {
    Problem pr = Problem::bhsd(1, 2, 2, 150, 150, 64);
    pr.softmax_scale = 0.3f;
    expect_pass(
        gpu_test::run_case(rt, config_for(64, Precision::f16, Mask::causal), pr, true, 0, 9));
  }
}

TEST_CASE("non-default tiles: every block shape, warp count and stage count", "[gpu]") {
  Runtime& rt = shared_runtime();
  struct Tile {
    int m, n, w, s;
  };
  for (Tile t : {Tile{64, 64, 4, 1}, Tile{128, 32, 8, 2}, Tile{64, 128, 4, 2}, Tile{128, 64, 4, 3},
                 Tile{32, 64, 2, 2}, Tile{16, 16, 1, 1}, Tile{128, 128, 8, 2}})
    for (Mask m : {Mask::none, Mask::causal}) {
      KernelConfig c = config_for(64, Precision::f16, m);
      c.block_m = t.m;
      c.block_n = t.n;
      c.num_warps = t.w;
      c.num_stages = t.s;
      const Problem pr = Problem::bhsd(1, 2, 2, 300, 301, 64);
      expect_pass(gpu_test::run_case(rt, c, pr, true, 0, t.m * t.n + t.s));
    }
}

TEST_CASE("a large problem matches on sampled rows", "[gpu][large]") {
  Runtime& rt = shared_runtime();
  for (Precision p : {Precision::f16, Precision::bf16})
    for (Mask m : {Mask::none, Mask::causal}) {
      const Problem pr = Problem::bhsd(4, 32, 32, 4096, 4096, 128);
      expect_pass(gpu_test::run_case(rt, config_for(128, p, m), pr, true, 128, 11));
    }
}

TEST_CASE("a problem past 2^31 elements per tensor matches on sampled rows", "[gpu][large]") {
  // Q and O hold 8 x (2^21 + 64) x 128 elements: past 2^31, so an offset computed in 32 bits
  // anywhere (the kernels, the 8-bit scales, the checksum workspace) lands in the wrong rows.
  // The output is poisoned first and scanned whole, so a row written nowhere fails too.
  Runtime& rt = shared_runtime();
  const Problem pr = Problem::bhsd(1, 8, 8, (1 << 21) + 64, 1024, 128);
  struct Case {
    Precision precision;
    Protection protection;
    Mask mask;
  };
  for (Case c : {Case{Precision::f16, Protection::none, Mask::none},
                 Case{Precision::f16, Protection::efta_correct, Mask::causal},
                 Case{Precision::int8, Protection::none, Mask::causal},
                 Case{Precision::fp8_e4m3, Protection::flash_abft, Mask::none}}) {
    KernelConfig config = config_for(128, c.precision, c.mask);
    config.protection = c.protection;
    INFO(to_string(c.precision) << " " << to_string(c.protection) << " " << to_string(c.mask));
    expect_pass(gpu_test::run_case(rt, config, pr, true, 256, 29));
  }
}

TEST_CASE("Runtime::attention fills an open config and launches on the caller's stream", "[gpu]") {
  Runtime& rt = shared_runtime();
  const Problem pr = Problem::bhsd(1, 2, 2, 64, 64, 64);
  KernelConfig open;
  open.precision = Precision::bf16;
  const KernelConfig full = rt.resolve(open, &pr);
  CHECK(full.is_complete());
  CHECK(full.head_dim == 64);
  CHECK(full.arch == rt.device_arch());
  expect_pass(gpu_test::run_case(rt, open, pr, true, 0, 12, /*via_attention=*/true));
}

TEST_CASE("launch rejects a problem that does not fit the kernel", "[gpu]") {
  Runtime& rt = shared_runtime();
  KernelConfig c = config_for(64, Precision::f16, Mask::none);
  const Problem pr = Problem::bhsd(1, 2, 2, 64, 64, 128);  // head_dim 128 vs kernel's 64
  auto kernel = rt.kernel(rt.resolve(c));
  CHECK_THROWS_AS(kernel->launch(pr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr),
                  ConfigError);
}

namespace {

// A random block mask of the given density for `pr` (its sparse block sizes set).
std::vector<uint8_t> random_block_mask(const Problem& pr, double density, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::bernoulli_distribution keep(density);
  std::vector<uint8_t> mask(pr.block_mask_bytes());
  for (auto& m : mask) m = keep(rng) ? 1 : 0;
  return mask;
}

}  // namespace

TEST_CASE("block-sparse masks skip blocks and match the reference", "[gpu][sparse]") {
  Runtime& rt = shared_runtime();
  for (Mask m : {Mask::block_sparse, Mask::block_sparse_causal})
    for (Precision p : {Precision::f16, Precision::bf16})
      for (auto [sq, sk] : std::vector<std::pair<int, int>>{{1000, 1000}, {300, 777}, {513, 200}}) {
        INFO(to_string(m) << " seqlen_q " << sq << " seqlen_k " << sk);
        Problem pr = Problem::bhsd(2, 4, 2, sq, sk, 128);
        pr.sparse_block_m = 128;
        pr.sparse_block_n = 128;
        const auto mask = random_block_mask(pr, 0.5, sq + sk);
        expect_pass(gpu_test::run_case(rt, config_for(128, p, m), pr, true, 0, sq, false, &mask));
      }
}

TEST_CASE("block-sparse: a mask shared by all heads, coarse blocks, empty rows", "[gpu][sparse]") {
  Runtime& rt = shared_runtime();
  Problem pr = Problem::bhsd(1, 4, 4, 700, 900, 64);
  pr.sparse_block_m = 256;  // a multiple of the kernel's block_m
  pr.sparse_block_n = 192;  // a multiple of the kernel's block_n
  pr.block_mask_head_stride = 0;
  auto mask = random_block_mask(pr, 0.4, 3);
  for (int kb = 0; kb < pr.block_mask_k_blocks(); ++kb) mask[kb] = 0;  // first rows see nothing
  expect_pass(gpu_test::run_case(rt, config_for(64, Precision::f16, Mask::block_sparse), pr, true,
                                 0, 4, /*via_attention=*/true, &mask));
}

TEST_CASE("block-sparse: skipped blocks cost no time", "[gpu][sparse]") {
  Runtime& rt = shared_runtime();
  Problem pr = Problem::bhsd(4, 16, 16, 4096, 4096, 128);
  pr.sparse_block_m = 128;
  pr.sparse_block_n = 128;
  // The same kernel on a full mask and on a quarter of the blocks: time should follow the work.
  std::vector<uint8_t> full(pr.block_mask_bytes(), 1);
  std::vector<uint8_t> quarter = full;
  for (size_t i = 0; i < quarter.size(); ++i) quarter[i] = i % 4 == 0;
  const KernelConfig c = rt.resolve(config_for(128, Precision::f16, Mask::block_sparse), &pr);
  auto kernel = rt.kernel(c);
  std::mt19937_64 rng(1);
  auto q = reference::random_tensor(rng, c.precision, pr.q, pr.batch, pr.heads_q, pr.seqlen_q, 128);
  runtime::DeviceBuffer dq(q.data.size() * 2), dout(q.data.size() * 2), dmask(full.size());
  dq.upload(q.data.data(), dq.bytes());
  auto time_with = [&](const std::vector<uint8_t>& mask) {
    dmask.upload(mask.data(), mask.size());
    auto launch = [&] {
      kernel->launch(pr, dq.data(), dq.data(), dq.data(), dout.data(), nullptr, nullptr,
                     static_cast<const unsigned char*>(dmask.data()));
    };
    for (int i = 0; i < 3; ++i) launch();
    runtime::EventTimer timer;
    std::vector<float> ms;
    for (int i = 0; i < 10; ++i) {
      timer.start(nullptr);
      launch();
      timer.stop(nullptr);
      ms.push_back(timer.elapsed_ms());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  const float t_full = time_with(full), t_quarter = time_with(quarter);
  INFO("full mask " << t_full << " ms, a quarter of the blocks " << t_quarter << " ms");
  CHECK(t_quarter < 0.45f * t_full);
  CHECK(t_quarter > 0.10f * t_full);
}

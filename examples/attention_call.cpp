// The config-struct call: run causal attention on the GPU with a partly open config.
//   ./example_attention_call
#include <cstdio>
#include <random>
#include <vector>

#include "ftattn/ftattn.hpp"
#include "ftattn/reference.hpp"
#include "runtime/driver.hpp"

int main() try {
  ftattn::Runtime rt;
  if (!rt.has_device()) {
    std::puts("No GPU found: this example launches a kernel, so it stops here.");
    return 0;
  }
  // 2 sequences, 16 query heads sharing 4 K/V heads, 1000 tokens, head dim 128.
  const ftattn::Problem problem = ftattn::Problem::bhsd(2, 16, 4, 1000, 1000, 128);
  ftattn::KernelConfig config;  // block sizes, warps, stages and arch left open: defaults
  config.precision = ftattn::Precision::bf16;
  config.mask = ftattn::Mask::causal;

  std::mt19937_64 rng(42);
  auto make = [&](const ftattn::Strides& s, int heads, int seqlen) {
    return ftattn::reference::random_tensor(rng, config.precision, s, problem.batch, heads, seqlen,
                                            problem.head_dim);
  };
  auto q = make(problem.q, problem.heads_q, problem.seqlen_q);
  auto k = make(problem.k, problem.heads_kv, problem.seqlen_k);
  auto v = make(problem.v, problem.heads_kv, problem.seqlen_k);

  using ftattn::runtime::DeviceBuffer;
  DeviceBuffer dq(q.data.size() * 2), dk(k.data.size() * 2), dv(v.data.size() * 2),
      dout(q.data.size() * 2);
  dq.upload(q.data.data(), dq.bytes());
  dk.upload(k.data.data(), dk.bytes());
  dv.upload(v.data.data(), dv.bytes());

  rt.attention(problem, dq.data(), dk.data(), dv.data(), dout.data(), /*stream=*/nullptr, config);

  ftattn::reference::Tensor16 o{std::vector<uint16_t>(q.data.size()), problem.o};
  dout.download(o.data.data(), dout.bytes());
  const auto report = ftattn::reference::check(problem, config.precision, config.mask, q, k, v, o,
                                               nullptr, /*rows=*/64);
  std::printf("%s\n%s\n", rt.resolve(config, &problem).name().c_str(), report.summary().c_str());
  return report.passed ? 0 : 1;
} catch (const ftattn::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
}

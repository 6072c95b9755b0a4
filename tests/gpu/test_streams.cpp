// One kernel object launched on two streams at once. Runtime hands every caller of a config the
// same object, and some kernels keep buffers of their own (f16_pasa's shifted keys, a checksum
// scheme's workspace and fault log, decoupled's S and P, the 8-bit operands): a launch on another
// stream must not run over them while the first still reads them. Each stream's output must be
// the one it gives alone, bit for bit.
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "ftattn/reference.hpp"
#include "ftattn/runtime.hpp"
#include "runtime/driver.hpp"
#include "tests/gpu/attention_case.hpp"

using namespace ftattn;

namespace {

struct Inputs {
  runtime::DeviceBuffer q, k, v, o;
};

Inputs make_inputs(const Problem& p, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto upload = [](const reference::Tensor16& t) {
    runtime::DeviceBuffer b(t.data.size() * 2);
    b.upload(t.data.data(), b.bytes());
    return b;
  };
  Inputs in;
  const Precision f16 = Precision::f16;
  in.q =
      upload(reference::random_tensor(rng, f16, p.q, p.batch, p.heads_q, p.seqlen_q, p.head_dim));
  in.k =
      upload(reference::random_tensor(rng, f16, p.k, p.batch, p.heads_kv, p.seqlen_k, p.head_dim));
  in.v =
      upload(reference::random_tensor(rng, f16, p.v, p.batch, p.heads_kv, p.seqlen_k, p.head_dim));
  in.o = runtime::DeviceBuffer(
      reference::span_elements(p.o, p.batch, p.heads_q, p.seqlen_q, p.head_dim) * 2);
  return in;
}

std::vector<uint16_t> output(const Inputs& in) {
  std::vector<uint16_t> out(in.o.bytes() / 2);
  in.o.download(out.data(), in.o.bytes());
  return out;
}

struct Stream {
  CUstream handle = nullptr;
  Stream() {
    runtime::check(runtime::driver().cuStreamCreate(&handle, CU_STREAM_NON_BLOCKING),
                   "cuStreamCreate");
  }
  ~Stream() { runtime::driver().cuStreamDestroy(handle); }
  void sync() const {
    runtime::check(runtime::driver().cuStreamSynchronize(handle), "cuStreamSynchronize");
  }
};

}  // namespace

TEST_CASE("two streams on one kernel object keep their outputs apart", "[gpu][streams]") {
  Runtime rt;
  REQUIRE(rt.has_device());
  struct Case {
    const char* what;
    Precision precision;
    Protection protection;
    int head_dim;
    Problem problem;
  };
  const std::vector<Case> cases = {
      {"f16_pasa", Precision::f16_pasa, Protection::none, 64,
       Problem::bhsd(4, 16, 16, 2048, 2048, 64)},
      {"efta_correct", Precision::f16, Protection::efta_correct, 128,
       Problem::bhsd(4, 16, 16, 2048, 2048, 128)},
      {"flash_abft", Precision::f16, Protection::flash_abft, 128,
       Problem::bhsd(4, 16, 16, 2048, 2048, 128)},
      {"int8", Precision::int8, Protection::none, 128, Problem::bhsd(4, 16, 16, 2048, 2048, 128)},
      {"int8 efta_detect", Precision::int8, Protection::efta_detect, 64,
       Problem::bhsd(2, 16, 16, 2048, 2048, 64)},
      {"decoupled", Precision::f16, Protection::decoupled, 64,
       Problem::bhsd(2, 8, 8, 1024, 1024, 64)},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    KernelConfig open;
    open.head_dim = c.head_dim;
    open.precision = c.precision;
    open.protection = c.protection;
    const auto kernel = rt.kernel(rt.resolve(open, &c.problem));
    INFO(kernel->config().name());
    Inputs a = make_inputs(c.problem, 1), b = make_inputs(c.problem, 2);
    Stream sa, sb;
    auto launch = [&](Inputs& in, const Stream& s) {
      kernel->launch(c.problem, in.q.data(), in.k.data(), in.v.data(), in.o.data(), nullptr,
                     s.handle);
    };
    // Alone: each stream's output with nothing beside it.
    launch(a, sa);
    sa.sync();
    const std::vector<uint16_t> alone_a = output(a);
    launch(b, sb);
    sb.sync();
    const std::vector<uint16_t> alone_b = output(b);
    REQUIRE(alone_a != alone_b);  // different inputs, so a mix-up shows

    // Together, several times over: the second launch is enqueued while the first runs.
    for (int round = 0; round < 5; ++round) {
      a.o.fill_bytes(0xFF);
      b.o.fill_bytes(0xFF);
      launch(a, sa);
      launch(b, sb);
      launch(a, sa);
      sa.sync();
      sb.sync();
      CHECK(output(a) == alone_a);
      CHECK(output(b) == alone_b);
    }
  }
}

TEST_CASE("resolve keeps a tuned tile only when it suits the caller's other knobs",
          "[gpu][resolve]") {
  Runtime rt;
  REQUIRE(rt.has_device());
  if (!llvm_route_built()) {
    WARN("the LLVM route is not built: nothing to check");
    return;
  }
  // The shipped DBs hold three-consumer tiles (num_warps 12) the LLVM route does not take; they
  // came back unvalidated with the caller's backend copied onto them.
  for (int seqlen : {512, 2048, 4096, 16384})
    for (Mask mask : {Mask::none, Mask::causal}) {
      const Problem p = Problem::bhsd(1, 16, 16, seqlen, seqlen, 128);
      KernelConfig open;
      open.head_dim = 128;
      open.mask = mask;
      open.backend = Backend::llvm;
      const KernelConfig c = rt.resolve(open, &p);
      INFO(c.name());
      CHECK(c.backend == Backend::llvm);
      CHECK_NOTHROW(validate(c));
      CHECK_NOTHROW(validate(p, c));
    }
}

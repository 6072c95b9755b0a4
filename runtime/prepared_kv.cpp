#include "runtime/prepared_kv.hpp"

#include <fmt/format.h>

#include <vector>

#include "codegen/checksum_atoms.hpp"
#include "ftattn/errors.hpp"

namespace ftattn {

std::string PreparedKv::prepared_by() const { return state_ ? state_->subject.kernel : "nothing"; }

namespace runtime {
namespace {

std::string strides(const Strides& s) {
  return fmt::format("({}, {}, {})", s.batch, s.head, s.seq);
}
bool same(const Strides& a, const Strides& b) {
  return a.batch == b.batch && a.head == b.head && a.seq == b.seq;
}

}  // namespace

std::string unpreparable_reason(const KernelConfig& c) {
  if (c.protection == Protection::decoupled)
    return "the decoupled baseline checks its three kernels without a prologue";
  if (c.precision == Precision::int8 || c.precision == Precision::fp8_e4m3)
    return "int8 and fp8 build their checksum rows from each call's quantised K and V (to quantise "
           "a KV cache once, call quantize() once and launch_quantized() per call: "
           "ftattn/quantize.hpp)";
  if (c.protection == Protection::none && c.precision != Precision::f16_pasa)
    return "it is unprotected: its calls do no work on K and V before the attention";
  return {};
}

void require_preparable(const KernelConfig& c) {
  const std::string why = unpreparable_reason(c);
  if (!why.empty())
    throw ConfigError(fmt::format(
        "{} has nothing to prepare: {}. Leave ProtectOptions::prepared_kv unset", c.name(), why));
}

PreparedSubject prepared_subject(const KernelConfig& c, const Problem& problem, const void* k,
                                 const void* v) {
  const codegen::ChecksumAtoms atoms = codegen::checksum_atoms(c.protection);
  PreparedSubject s;
  s.kernel = c.name();
  s.precision = c.precision;
  s.protection = c.protection;
  s.head_dim = c.head_dim;
  s.block_n = c.block_n;
  s.batch = problem.batch;
  s.heads_kv = problem.heads_kv;
  s.seqlen_k = problem.seqlen_k;
  const bool pasa = c.precision == Precision::f16_pasa;
  if (atoms.k > 0 || pasa) s.k = k, s.k_strides = problem.k;
  if (atoms.v > 0) s.v = v, s.v_strides = problem.v;
  if (pasa) s.scale = problem.scale();
  return s;
}

void require_same_subject(const PreparedSubject& e, const PreparedSubject& w) {
  // e: as prepared; w: this call's.
  std::vector<std::string> differ;
  auto knob = [&](const char* name, auto encoded, auto wanted) {
    if (encoded != wanted)
      differ.push_back(fmt::format("{} {} (this call: {})", name, encoded, wanted));
  };
  knob("precision", to_string(e.precision), to_string(w.precision));
  knob("protection", to_string(e.protection), to_string(w.protection));
  knob("head_dim", e.head_dim, w.head_dim);
  knob("block_n", e.block_n, w.block_n);
  knob("batch", e.batch, w.batch);
  knob("heads_kv", e.heads_kv, w.heads_kv);
  knob("seqlen_k", e.seqlen_k, w.seqlen_k);
  auto tensor = [&](const char* name, const void* encoded, const void* wanted, const Strides& es,
                    const Strides& ws) {
    if (encoded != wanted)
      differ.push_back(fmt::format("{} at {} (this call: {})", name, encoded, wanted));
    else if (!same(es, ws))
      differ.push_back(
          fmt::format("{} strides {} (this call: {})", name, strides(es), strides(ws)));
  };
  tensor("K", e.k, w.k, e.k_strides, w.k_strides);
  tensor("V", e.v, w.v, e.v_strides, w.v_strides);
  knob("softmax scale", e.scale, w.scale);
  if (!differ.empty())
    throw ConfigError(fmt::format(
        "K and V as prepared by {} cannot serve {}: they were prepared with {}. Prepare them for "
        "this call with its kernel's prepare_kv",
        e.kernel, w.kernel, fmt::join(differ, ", ")));
}

const PreparedKv::State* prepared_for(const ProtectOptions& protect, const KernelConfig& config,
                                      const Problem& problem, const void* k, const void* v) {
  if (protect.prepared_kv == nullptr) return nullptr;
  if (protect.prepared_kv->empty())
    throw ConfigError(
        "ProtectOptions::prepared_kv points at an empty PreparedKv: fill it with the kernel's "
        "prepare_kv first");
  require_preparable(config);
  const PreparedKv::State* state = protect.prepared_kv->state();
  require_same_subject(state->subject, prepared_subject(config, problem, k, v));
  return state;
}

}  // namespace runtime
}  // namespace ftattn

// Names of the fault enums and the one-line summary of a FaultReport.
#include "ftattn/fault.hpp"

#include <fmt/format.h>

#include <array>
#include <utility>

#include "ftattn/errors.hpp"

namespace ftattn {
namespace {

template <class Enum, size_t N>
Enum parse_named(std::string_view what, std::string_view text,
                 const std::array<std::pair<Enum, std::string_view>, N>& names) {
  std::string valid;
  for (const auto& [value, name] : names) {
    if (text == name) return value;
    valid += (valid.empty() ? "" : ", ") + std::string(name);
  }
  throw ConfigError(fmt::format("unknown {} '{}': use one of {}", what, text, valid));
}

constexpr std::array<std::pair<OnFault, std::string_view>, 3> kOnFault = {
    {{OnFault::report, "report"}, {OnFault::recompute, "recompute"}, {OnFault::raise, "throw"}}};
constexpr std::array<std::pair<FaultSite, std::string_view>, 11> kSites = {
    {{FaultSite::none, "none"},
     {FaultSite::scores, "scores"},
     {FaultSite::probs, "probs"},
     {FaultSite::row_max, "row_max"},
     {FaultSite::row_sum, "row_sum"},
     {FaultSite::rescale, "rescale"},
     {FaultSite::output, "output"},
     {FaultSite::checksum, "checksum"},
     {FaultSite::ir, "ir"},
     {FaultSite::pv, "pv"},
     {FaultSite::scale, "scale"}}};

template <class Enum, size_t N>
std::string_view name_of(std::string_view field, std::string_view kind, Enum e,
                         const std::array<std::pair<Enum, std::string_view>, N>& names) {
  for (const auto& [value, name] : names)
    if (value == e) return name;
  // A value cast from outside the enum: as the config enums do, say so (it would otherwise
  // act as whichever case a later switch falls into).
  throw ConfigError(fmt::format("{} {} is not {} value", field, static_cast<int>(e), kind));
}

}  // namespace

std::string_view to_string(OnFault f) { return name_of("on_fault", "an OnFault", f, kOnFault); }
OnFault parse_on_fault(std::string_view text) { return parse_named("on_fault", text, kOnFault); }
std::string_view to_string(FaultSite s) { return name_of("site", "a FaultSite", s, kSites); }
FaultSite parse_fault_site(std::string_view text) {
  return parse_named("fault site", text, kSites);
}

std::string_view to_string(FaultStage s) {
  switch (s) {
    case FaultStage::scores:
      return "scores";
    case FaultStage::probs:
      return "probs";
    case FaultStage::row_sum:
      return "row_sum";
    case FaultStage::output:
      return "output";
    case FaultStage::row_max:
      return "row_max";
  }
  return "?";
}

std::string FaultReport::summary() const {
  if (clean()) return "no faults detected";
  std::string s = fmt::format("{} detected, {} corrected", detected, corrected);
  if (recomputed_tiles > 0) s += fmt::format(", {} tiles recomputed", recomputed_tiles);
  if (unresolved > 0)
    s += fmt::format(" ({} detections in the recompute itself left uncorrected: not proven right)",
                     unresolved);
  if (!events.empty()) {
    const FaultEvent& e = events.front();
    s += fmt::format("; first: {} at batch {}, head {}, row {}", to_string(e.stage), e.batch,
                     e.head, e.row);
    if (e.col >= 0) s += fmt::format(", col {}", e.col);
    s += fmt::format(" (|diff| {:.3g} > {:.3g})", e.magnitude, e.threshold);
  }
  return s;
}

}  // namespace ftattn

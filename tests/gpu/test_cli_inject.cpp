// `ftattn inject` end to end on a GPU: the trials alone on standard output with `--csv -`, the
// summary CSV's settings columns, and a fault-free run with alarms refused unless allowed.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "ftattn/campaign.hpp"
#include "tests/support/shell.hpp"
#include "tests/support/temp_dir.hpp"

#ifndef FTATTN_CLI_PATH
#error "FTATTN_CLI_PATH must name the built ftattn executable"
#endif

namespace {

using ftattn::test::CliRun;
using ftattn::test::shell_quote;

// The CLI built beside this binary, or $FTATTN_CLI where the binaries were copied elsewhere (the
// GPU machine).
std::string cli_path() {
  const char* moved = std::getenv("FTATTN_CLI");
  return moved != nullptr && *moved != '\0' ? moved : FTATTN_CLI_PATH;
}

CliRun inject(const ftattn::test::TempDir& dir, const std::string& args) {
  const CliRun r = ftattn::test::run_cli(
      cli_path(), dir.path(),
      "--cache-dir " + shell_quote((dir.path() / "c").string()) + " inject " + args);
  UNSCOPED_INFO(ftattn::test::describe(r));
  return r;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

const char* const kCampaign =
    "--head-dim 64 --protection flash_abft --site scores --trials 20 --bits 30 --shape 1,2,256 ";

}  // namespace

TEST_CASE("cli inject: --csv - writes the trials alone to standard output",
          "[gpu][campaign][cli]") {
  ftattn::test::TempDir dir;
  const auto summary = dir.path() / "summary.csv";
  const CliRun r = inject(
      dir, std::string(kCampaign) + "--csv - --summary-csv " + shell_quote(summary.string()));
  REQUIRE(r.exit_code == 0);
  const std::vector<std::string> out = lines(r.out);
  REQUIRE(out.size() == 21u);  // the header and one row per trial, no log
  CHECK(out[0] == ftattn::campaign::trials_csv_header());
  CHECK(ftattn::test::contains(r.err, "campaign  flash_abft, site scores"));
  CHECK(ftattn::test::contains(r.err, "device    "));
  // The summary: bits as lo:hi, the settings, the fault-free run's detections (none).
  const std::vector<std::string> rows = lines(ftattn::test::read_file(summary));
  REQUIRE(rows.size() == 2u);
  CHECK(ftattn::test::contains(rows[0], ",baseline_detected"));
  CHECK(ftattn::test::contains(rows[1], ",scores,30:30,20,"));
  CHECK(ftattn::test::contains(rows[1], ",report,0,scores="));
  // seed, heads_kv, ir_count (site ir only), baseline_detected.
  CHECK(rows[1].substr(rows[1].size() - 8) == ",1,2,-,0");
}

TEST_CASE("cli inject: a fault-free run with alarms is refused unless allowed",
          "[gpu][campaign][cli]") {
  // An output threshold far below FP32 rounding: the fault-free run alarms.
  ftattn::test::TempDir dir;
  const std::string tight = std::string(kCampaign) + "--thresholds output=1e-12 ";
  const CliRun refused = inject(dir, tight);
  CHECK(refused.exit_code == 2);
  CHECK(ftattn::test::contains(refused.err, "the fault-free run reported detections"));
  CHECK(ftattn::test::contains(refused.err, "--allow-clean-alarms"));
  const auto summary = dir.path() / "summary.csv";
  const CliRun allowed =
      inject(dir, tight + "--allow-clean-alarms --summary-csv " + shell_quote(summary.string()));
  CHECK(allowed.exit_code == 0);
  const std::vector<std::string> rows = lines(ftattn::test::read_file(summary));
  REQUIRE(rows.size() == 2u);
  // baseline_detected, last: the fault-free run's alarms, at least one.
  const std::string last = rows[1].substr(rows[1].rfind(',') + 1);
  CHECK(last != "0");
  CHECK(last != "-");
}

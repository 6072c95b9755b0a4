// What `ftattn tune` reports once the shapes are tuned: every failed check, the results table and
// its CSV, the --verify pass. Apart from the GPU, so that the CPU tests drive it with a fake timer.
#pragma once

#include <ostream>
#include <vector>

#include "tuner/tune.hpp"

namespace ftattn::cli {

struct TuneSummary {
  int failed_checks = 0;   // measurements that failed the reference check or did not run
  int without_winner = 0;  // shapes where nothing passed: no DB entry
};

// Each failed check on `err` (shape, kernel name, reason; the heuristic default's said as such)
// and each shape with no winner; then the table on `out`, and its rows on `csv` when given ('-'
// where no config won). With `verify`, every valid config of each tuned shape is timed again and
// the tuned choice's share of the fastest printed, or that nothing was verified. Ends with a
// count of the failures on `err`, if any.
TuneSummary report_tune(const std::vector<tuner::ShapeResult>& results, Precision precision,
                        tuner::Timer* verify, std::ostream& out, std::ostream& err,
                        std::ostream* csv);

}  // namespace ftattn::cli

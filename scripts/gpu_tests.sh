#!/bin/bash
# Runs the GPU tests with each test case in a process of its own, JOBS at a time: a case spends
# most of its time compiling kernels and computing references on one core, so a whole group run
# in one process leaves a 16-core GPU host idle. Prints one line per case and a count of failures;
# a failing case's output is kept in LOG_DIR.
#
#   scripts/gpu_tests.sh [test spec] [per-case timeout, s]     e.g. scripts/gpu_tests.sh "[q8]" 600
#
# Environment: GPU_TESTS (the binary, default build/ftattn_gpu_tests), JOBS (default: cores - 2),
# LOG_DIR (default: a new temporary directory), CASES_FILE (case names, one a line, run in that
# order instead of the spec's: longest first keeps one long case from starting last). Kernels go
# to the usual cache ($FTATTN_CACHE_DIR).
set -u
spec=${1:-}
limit=${2:-900}
bin=${GPU_TESTS:-build/ftattn_gpu_tests}
jobs=${JOBS:-$(($(nproc) > 3 ? $(nproc) - 2 : 1))}
log_dir=${LOG_DIR:-$(mktemp -d -t ftattn-gpu-tests.XXXXXX)}
mkdir -p "$log_dir"
[ -x "$bin" ] || { echo "gpu_tests.sh: no test binary at $bin (build first, or set GPU_TESTS)" >&2; exit 2; }

run_case() {
  local index=$1 name=$2 log="$log_dir/case_$1.log"
  # Catch2 splits a spec at commas: escape them to name one case.
  local start=$SECONDS
  timeout "$limit" "$bin" "${name//,/\\,}" >"$log" 2>&1
  local rc=$? took=$((SECONDS - start))
  local result
  result=$(grep -E "^(All tests passed|test cases:)" "$log" | tail -1)
  [ $rc -eq 124 ] && result="ran past ${limit} s"
  printf 'rc=%s | %4d s | %s | %s\n' "$rc" "$took" "$name" "$result"
  [ $rc -eq 0 ] && rm -f "$log"
}
export -f run_case
export bin limit log_dir

list_cases() {
  if [ -n "${CASES_FILE:-}" ]; then cat "$CASES_FILE"; else "$bin" --list-test-names-only ${spec:+"$spec"}; fi
}
list_cases | grep -v '^$' | awk '{ print NR "\t" $0 }' |
  tr '\t' '\n' | xargs -r -d '\n' -n 2 -P "$jobs" bash -c 'run_case "$@"' _ | tee "$log_dir/summary"
total=$(grep -c '^rc=' "$log_dir/summary")
[ "$total" -eq 0 ] && { echo "gpu_tests.sh: no test case matches '$spec'" >&2; exit 2; }
failed=$(grep -vc '^rc=0 ' "$log_dir/summary")
echo "$total cases, $failed failed (logs of failures: $log_dir)"
[ "$failed" -eq 0 ]

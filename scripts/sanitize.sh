#!/usr/bin/env bash
# Builds the CPU test binary and the CLI with AddressSanitizer and UndefinedBehaviorSanitizer in
# their own build folder and runs the CPU tests there (no GPU needed; about half an hour on two
# cores). Any sanitizer report fails the run. Leak checking is off: NVRTC keeps allocations for
# the life of the process, which would drown the report.
#
#   scripts/sanitize.sh [Catch test spec]        e.g. scripts/sanitize.sh "[campaign]"
#
# Environment: BUILD_DIR (default build-sanitize). Run scripts/setup.sh first on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BUILD_DIR:-build-sanitize}
flags="-fsanitize=address,undefined -fno-omit-frame-pointer"
# --as-needed: the CUDA toolkit's targets name the driver stub, which the library only opens at
# run time; without it the instrumented binaries would ask for libcuda.so.1 at load.
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DFTATTN_WITH_LLVM=OFF \
  -DCMAKE_CXX_FLAGS="$flags -O1" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined -Wl,--as-needed" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
ninja -C "$dir" ftattn_tests ftattn_cli
log=$(mktemp -t ftattn-sanitize.XXXXXX)
status=0
ASAN_OPTIONS=detect_leaks=0:halt_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
  FTATTN_CACHE_DIR="$dir/cache" "$dir/ftattn_tests" ${1:+"$1"} >"$log" 2>&1 || status=$?
tail -n 3 "$log"
if grep -qE "ERROR: AddressSanitizer|runtime error:" "$log"; then
  grep -E -A12 "ERROR: AddressSanitizer|runtime error:" "$log" | head -60
  echo "sanitize.sh: sanitizer reports above (whole log: $log)" >&2
  exit 1
fi
[ "$status" -eq 0 ] || { echo "sanitize.sh: tests failed (log: $log)" >&2; exit "$status"; }
echo "sanitize.sh: no sanitizer report"

#!/usr/bin/env bash
# Sets up, builds, and runs the CPU test suite (no GPU needed). The GPU tests are a separate
# binary, build/ftattn_gpu_tests, run on a machine with a GPU (scripts/gpu_tests.sh: case by case).
set -euo pipefail
cd "$(dirname "$0")/.."
# ctest splits test names at ';': a Catch case with one in its name would silently never run.
if grep -rnE 'TEST_CASE\("[^"]*;' tests; then
  echo "test.sh: rename the test cases above (no ';' in Catch test names: ctest splits at it)" >&2
  exit 1
fi
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"

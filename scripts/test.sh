#!/usr/bin/env bash
# Sets up, builds, and runs the CPU test suite (no GPU needed). The GPU tests are a separate
# binary, build/ftattn_gpu_tests, run on a machine with a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"

#!/usr/bin/env bash
# Sets up, builds, and runs the main job: `ftattn demo`. On a GPU it runs kernels and checks
# them against a reference; without one it generates, compiles and inspects them and says that
# nothing was launched.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/ftattn demo

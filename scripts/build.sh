#!/usr/bin/env bash
# Configures and builds into ./build (Release, Ninja).
set -euo pipefail
cd "$(dirname "$0")/.."
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
command -v nvcc >/dev/null 2>&1 || export PATH="$cuda_home/bin:$PATH"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"

#!/usr/bin/env bash
# Installs what ftattn builds with (Debian packages) and checks for the CUDA toolkit, which
# provides NVRTC and the Driver API headers. Safe to run again: it installs only what is missing.
set -euo pipefail

# LLVM and clang 22 (pinned): the LLVM route's front end, passes and NVPTX back end.
packages=(cmake ninja-build g++ make python3 catch2 nlohmann-json3-dev libcli11-dev libfmt-dev
          libxxhash-dev llvm-22-dev clang-22 libclang-22-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

cuda_home="${CUDA_HOME:-/usr/local/cuda}"
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x "$cuda_home/bin/nvcc" ]; then
  echo "setup: the CUDA toolkit (12.0 or newer; NVRTC and cuda.h) was not found." >&2
  echo "       Install it and put its bin folder on PATH, or set CUDA_HOME." >&2
  exit 1
fi
echo "setup: dependencies present"

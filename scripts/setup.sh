#!/usr/bin/env bash
# Installs what ftattn builds with (Debian packages) and checks for the CUDA toolkit, which
# provides NVRTC and the Driver API headers. Safe to run again: it installs only what is missing.
set -euo pipefail

packages=(cmake ninja-build g++ make python3 catch2 nlohmann-json3-dev libcli11-dev libfmt-dev
          libxxhash-dev)
# LLVM and clang 22 (pinned): the LLVM route's front end, passes and NVPTX back end. Optional:
# without them the build leaves the route out (CMakeLists.txt), so a distribution that does not
# package LLVM 22 still builds everything else.
llvm_packages=(llvm-22-dev clang-22 libclang-22-dev)
missing=()
for p in "${packages[@]}" "${llvm_packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  install=()
  for p in "${missing[@]}"; do
    # The policy is read whole first: piped into `grep -q`, apt-cache took SIGPIPE when grep
    # stopped at the match, and under pipefail every package read as not packaged.
    if [[ " ${llvm_packages[*]} " == *" $p "* ]] &&
      ! grep -q 'Candidate: [0-9]' <<<"$(apt-cache policy "$p" 2>/dev/null || true)"; then
      echo "setup: $p is not packaged here: the build leaves the LLVM route out" \
        "(backend nvrtc only; add LLVM's apt repository for it)" >&2
      continue
    fi
    install+=("$p")
  done
  if ((${#install[@]})); then
    echo "setup: installing ${install[*]}"
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
      "${install[@]}"
  fi
fi

cuda_home="${CUDA_HOME:-/usr/local/cuda}"
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x "$cuda_home/bin/nvcc" ]; then
  echo "setup: the CUDA toolkit (12.0 or newer; NVRTC and cuda.h) was not found." >&2
  echo "       Install it and put its bin folder on PATH, or set CUDA_HOME." >&2
  exit 1
fi
echo "setup: dependencies present"

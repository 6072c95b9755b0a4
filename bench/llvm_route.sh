#!/usr/bin/env bash
# The LLVM route against the NVRTC route: compile time, kernel speed, GPU tests, and IR-level
# injection campaigns (with and without DMR hardening).
#
# Two steps, because LLVM-route kernels are compiled where LLVM is installed and run where the GPU
# is (the cache folder carries them across; the GPU machine needs no LLVM):
#   bash bench/llvm_route.sh prefill <build folder> <cache folder> <results folder>
#       on a machine with LLVM 22 (no GPU needed): compiles every LLVM-route kernel the GPU tests
#       and this bench launch into <cache folder>, and times both routes' compiles
#       (llvm_route_compile.csv)
#   bash bench/llvm_route.sh gpu <build folder> <cache folder> <results folder> [trials]
#       on the GPU machine: the [llvm] GPU tests, both routes' kernel times (llvm_route_speed.log),
#       and IR-level campaigns of [trials] (default 5000) per class and scheme (llvm_campaign.csv)
# ARCH (default sm_90a, the H100 and H200) names the GPU's arch in both steps.
set -uo pipefail
mode=$1
bin=$(cd "$2" && pwd)
cache=$(mkdir -p "$3" && cd "$3" && pwd)
out=$(mkdir -p "$4" && cd "$4" && pwd)
arch=${ARCH:-sm_90a}
trials=${5:-5000}
export PYTHONUNBUFFERED=1
tok=${arch/_/}  # sm_90a -> sm90a, as canonical names spell it

# What the GPU tests (tests/gpu/test_llvm_route.cpp) and the bench below launch.
names() {
  for p in f16 bf16; do for d in 64 128; do for m in none causal; do
    echo "ftattn_fwd_${tok}_${p}_d${d}_m128n64_w4s2_${m}_none_llvm"
  done; done; done
  for c in fp-arith exp-max mma; do
    echo "ftattn_fwd_${tok}_f16_d64_m128n64_w4s2_none_none_llvm-inject-${c}"
    echo "ftattn_fwd_${tok}_f16_d64_m128n64_w4s2_causal_none_llvm-inject-${c}-harden-${c}"
    echo "ftattn_fwd_${tok}_f16_d128_m128n64_w4s2_causal_none_llvm-inject-${c}"
    echo "ftattn_fwd_${tok}_f16_d128_m128n64_w4s2_causal_none_llvm-inject-${c}-harden-${c}"
    echo "ftattn_fwd_${tok}_f16_d128_m128n64_w4s2_causal_none_llvm-harden-${c}"
  done
}

case $mode in
  prefill)
    # shellcheck disable=SC2046
    "$bin/ftattn" --cache-dir "$cache" compile $(names) || exit 1
    echo "route,config,compile_seconds" > "$out/llvm_route_compile.csv"
    for d in 64 128; do for m in none causal; do
      base="ftattn_fwd_${tok}_f16_d${d}_m128n64_w4s2_${m}_none"
      for name in "$base" "${base}_llvm" "${base}_llvm-harden-fp-arith"; do
        fresh=$(mktemp -d)
        s=$("$bin/ftattn" --cache-dir "$fresh" inspect "$name" | sed -n 's/^build *compiled in \([0-9.]*\) s.*/\1/p')
        route=nvrtc; [[ $name == *_llvm* ]] && route=llvm
        echo "$route,$name,$s" | tee -a "$out/llvm_route_compile.csv"
        rm -rf "$fresh"
      done
    done; done
    ;;
  gpu)
    export FTATTN_CACHE_DIR=$cache
    "$bin/ftattn_gpu_tests" "[llvm]" --durations yes 2>&1 | tee "$out/llvm_gpu_tests.log" | tail -5
    {
      for d in 64 128; do for m in none causal; do
        base="ftattn_fwd_${tok}_f16_d${d}_m128n64_w4s2_${m}_none"
        for name in "$base" "${base}_llvm"; do
          "$bin/ftattn" run "$name" --batch 4 --heads 16 --seqlen 4096 --check-rows 64 2>&1 |
            grep -E "kernel|check|time|TFLOP" | sed "s/^/$name: /"
        done
      done; done
      # DMR overhead: the hardened kernels against the plain LLVM-route one.
      for c in fp-arith exp-max mma; do
        name="ftattn_fwd_${tok}_f16_d128_m128n64_w4s2_causal_none_llvm-harden-${c}"
        "$bin/ftattn" run "$name" --batch 4 --heads 16 --seqlen 4096 --check-rows 64 2>&1 |
          grep -E "kernel|check|time|TFLOP" | sed "s/^/$name: /"
      done
    } | tee "$out/llvm_route_speed.log"
    # IR-level campaigns: faults on random dynamic instructions of each class, unprotected and
    # under DMR of the same class, classified as the source-level campaigns are.
    for c in fp-arith exp-max mma; do
      for suffix in "llvm-inject-${c}" "llvm-inject-${c}-harden-${c}"; do
        "$bin/ftattn" inject --config "ftattn_fwd_${tok}_f16_d128_m128n64_w4s2_causal_none_${suffix}" \
          --site ir --trials "$trials" --shape 1,4,1024 --summary-csv "$out/llvm_campaign.csv" \
          2>&1 | tail -12 | tee -a "$out/llvm_campaign.log"
      done
    done
    ;;
  *)
    echo "usage: bash bench/llvm_route.sh prefill|gpu <build> <cache> <results> [trials]" >&2
    exit 2
    ;;
esac

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
#   bash bench/llvm_route.sh <stage> <build folder> <cache folder> <results folder> [trials]
#       on the GPU machine, one stage per command (each well within 10 minutes on an H100/H200):
#         gpu-tests     the [llvm] GPU tests (llvm_gpu_tests.log; about 1-2 minutes)
#         gpu-speed     both routes' kernel times (llvm_route_speed.log) and the DMR overhead:
#                       NVRTC, plain LLVM and each hardened class (llvm_dmr.csv; about 1 minute)
#         gpu-campaign  IR-level campaigns of [trials] (default 5000) per instrumented class and
#                       protection scheme (none, flash_abft, efta_detect, efta_correct) and under
#                       DMR of the class (llvm_campaign.csv, llvm_trials.csv, llvm_campaign.log;
#                       about 3-5 minutes at 5000 trials)
#         gpu           all three in a row
# ARCH (default sm_90a, the H100 and H200) names the GPU's arch in both steps; CLASSES (default
# "fp-arith mma") the instrumented classes of the campaigns.
set -uo pipefail
mode=$1
bin=$(cd "$2" && pwd)
cache=$(mkdir -p "$3" && cd "$3" && pwd)
out=$(mkdir -p "$4" && cd "$4" && pwd)
arch=${ARCH:-sm_90a}
trials=${5:-5000}
classes=${CLASSES:-fp-arith mma}
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
  campaign_names
}

# The IR-level campaigns: each class under every protection scheme, and under DMR of the class.
campaign_names() {
  for c in $classes; do
    for s in none flash-abft efta-detect efta-correct; do
      echo "ftattn_fwd_${tok}_f16_d128_m128n64_w4s2_causal_${s}_llvm-inject-${c}"
    done
    echo "ftattn_fwd_${tok}_f16_d128_m128n64_w4s2_causal_none_llvm-inject-${c}-harden-${c}"
  done
}

stage_tests() {
  "$bin/ftattn_gpu_tests" "[llvm]" --durations yes 2>&1 | tee "$out/llvm_gpu_tests.log" | tail -5
}

stage_speed() {
  {
    for d in 64 128; do for m in none causal; do
      base="ftattn_fwd_${tok}_f16_d${d}_m128n64_w4s2_${m}_none"
      for name in "$base" "${base}_llvm"; do
        "$bin/ftattn" run "$name" --batch 4 --heads 16 --seqlen 4096 --check-rows 64 2>&1 |
          grep -E "kernel|check|time|TFLOP" | sed "s/^/$name: /"
      done
    done; done
  } | tee "$out/llvm_route_speed.log"
  # DMR overhead: each hardened class against the plain LLVM-route kernel and the NVRTC one, same
  # shape and tile (bench: checked against the reference, then the median of 20 timed runs).
  local csv="$out/llvm_dmr.csv" part
  rm -f "$csv"
  for route in nvrtc llvm fp_arith exp_max mma; do
    case $route in
      nvrtc) flags=() ;;
      llvm) flags=(--backend llvm) ;;
      *) flags=(--backend llvm --ir-harden "$route") ;;
    esac
    part=$(mktemp)
    "$bin/ftattn" bench "${flags[@]}" --shapes "128,16,4096,4" --precisions f16 --masks causal \
      --tiles 128x64w4s2 --csv "$part" 2>&1 | grep -E "^d|skip|FAILED|error" | sed "s/^/$route: /"
    if [[ ! -s $csv ]]; then cat "$part" > "$csv"; else tail -n +2 "$part" >> "$csv"; fi
    rm -f "$part"
  done
}

stage_campaign() {
  # IR-level campaigns: faults on dynamic instances of one class drawn uniformly over what the
  # kernel runs (counted first, one launch per warp of every CTA), one launch per trial,
  # classified as the source-level campaigns are. Causal d128, 1 x 4 heads x 1024: 32 CTAs.
  # Every trial of every kernel goes to llvm_trials.csv, its kernel in the first column.
  local trials_csv="$out/llvm_trials.csv" part
  rm -f "$out/llvm_campaign.csv" "$out/llvm_campaign.log" "$trials_csv"
  for name in $(campaign_names); do
    echo "== $name" | tee -a "$out/llvm_campaign.log"
    part=$(mktemp)
    "$bin/ftattn" inject --config "$name" --site ir --trials "$trials" --shape 1,4,1024 \
      --summary-csv "$out/llvm_campaign.csv" --csv "$part" 2>&1 |
      grep -vE "^  ir: [0-9]+/" | tail -14 | tee -a "$out/llvm_campaign.log"
    [[ -s $trials_csv ]] || head -1 "$part" | sed 's/^/kernel,/' > "$trials_csv"
    tail -n +2 "$part" | sed "s/^/$name,/" >> "$trials_csv"
    rm -f "$part"
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
  gpu-tests | gpu-speed | gpu-campaign | gpu)
    export FTATTN_CACHE_DIR=$cache
    if [[ $mode == gpu-tests || $mode == gpu ]]; then stage_tests; fi
    if [[ $mode == gpu-speed || $mode == gpu ]]; then stage_speed; fi
    if [[ $mode == gpu-campaign || $mode == gpu ]]; then stage_campaign; fi
    ;;
  *)
    echo "usage: bash bench/llvm_route.sh prefill|gpu-tests|gpu-speed|gpu-campaign|gpu <build>" \
      "<cache> <results> [trials]" >&2
    exit 2
    ;;
esac

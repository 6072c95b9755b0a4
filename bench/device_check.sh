#!/usr/bin/env bash
# What the GPU owes for a change to the unprotected kernels, in stages that each fit the device
# machine's 10-minute command limit:
#   tests      the GPU tests of the skeleton and the tuner (attention, block-sparse, tune)
#   suites     every GPU suite but [llvm] (which needs llvm_route.sh's prefill), each with its own
#              log (gpu_tests_<suite>.log) and a summary line: skeleton, [q8], [pasa], [protect],
#              [campaign], [decoupled]; about 8-9 minutes on an H100 with an empty kernel cache
#   matrix     `ftattn run` against the reference over f16/bf16 x head dim 64/128 x both masks,
#              plus a block-sparse case
#   sanitizer  compute-sanitizer memcheck and racecheck on small runs
#   grid       the standard grid against torch SDPA (flash and cuDNN), two alternating rounds
#   all        tests, matrix, sanitizer and grid (longer than one command allows)
# The protection, precision and LLVM-route checks have scripts of their own
# (protect_check.sh, precision_check.sh, llvm_route.sh).
#   bash bench/device_check.sh <folder with ftattn and ftattn_gpu_tests> <results folder> [stage]
set -o pipefail
bin=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
stage=${3:-all}
here=$(cd "$(dirname "$0")" && pwd)
want() { [[ $stage == all || $stage == "$1" ]]; }
export FTATTN_CACHE_DIR=${FTATTN_CACHE_DIR:-/tmp/ftattn-cache} PYTHONUNBUFFERED=1
cd "$bin"
if want tests; then
  ./ftattn_gpu_tests "[gpu]~[q8]~[decoupled]~[llvm]~[campaign]~[protect]~[precision]" \
    --durations yes 2>&1 | tail -40 > "$out/gpu_tests.log"
  echo "gpu tests rc=$?" | tee -a "$out/gpu_tests.log"
fi
if [[ $stage == suites ]]; then
  for suite in "skeleton:[gpu]~[q8]~[decoupled]~[llvm]~[campaign]~[protect]~[precision]" \
               "q8:[q8]" "pasa:[pasa]" "protect:[protect]~[q8]" "campaign:[campaign]" \
               "decoupled:[decoupled]"; do
    name=${suite%%:*}
    start=$(date +%s)
    ./ftattn_gpu_tests "${suite#*:}" --durations yes > "$out/gpu_tests_$name.log" 2>&1
    rc=$?
    echo "$name rc=$rc $(grep -E 'test cases' "$out/gpu_tests_$name.log" | tail -1)" \
      "($(( $(date +%s) - start )) s)"
  done | tee "$out/gpu_suites.log"
fi
if want matrix; then
  {
    for d in 64 128; do for p in f16 bf16; do for m in none causal; do
      ./ftattn run --head-dim $d --precision $p --mask $m --batch 2 --heads 4 --seqlen 1000 \
        --seqlen-k 1200 --lse --check-rows 0 --iters 0 | grep -E "kernel|check"
    done; done; done
    ./ftattn run --head-dim 128 --mask block_sparse_causal --sparse-block 128x128 --density 0.5 \
      --batch 2 --heads 4 --seqlen 2048 --check-rows 0 --lse | grep -E "kernel|check|time"
  } 2>&1 | tee "$out/run_matrix.log" | grep -c PASS
fi
if want sanitizer; then
  for cfg in "--head-dim 128 --mask causal" "--head-dim 64 --mask causal" "--head-dim 256" \
             "--head-dim 128 --mask block_sparse --sparse-block 128x128"; do
    for tool in memcheck racecheck; do
      # shellcheck disable=SC2086
      echo "== $tool $cfg: $(compute-sanitizer --tool $tool --error-exitcode 3 ./ftattn run $cfg \
        --batch 1 --heads 2 --seqlen 300 --iters 0 --check-rows 0 2>&1 |
        grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|check' | tr '\n' ' ')"
    done
  done 2>&1 | tee "$out/sanitizer.log"
fi
if want grid; then
  python3 "$here/compare.py" --ftattn ./ftattn --name fwd_grid --rounds 2 --out "$out" \
    > "$out/compare.log" 2>&1
  echo "compare rc=$?"
fi

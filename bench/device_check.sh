#!/usr/bin/env bash
# Everything the GPU owes for a kernel change, in one call on the device machine: the GPU test
# binary, `ftattn run` against the reference over f16/bf16 x head dim 64/128 x both masks (plus a
# block-sparse case), compute-sanitizer memcheck and racecheck on small runs, and the standard
# grid against torch SDPA (flash and cuDNN) via bench/compare.py.
#   bash bench/device_check.sh <folder with ftattn and ftattn_gpu_tests> <results folder>
set -o pipefail
bin=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
export FTATTN_CACHE_DIR=${FTATTN_CACHE_DIR:-/tmp/ftattn-cache} PYTHONUNBUFFERED=1
cd "$bin"
./ftattn_gpu_tests --durations yes 2>&1 | tail -40 > "$out/gpu_tests.log"
echo "gpu tests rc=$?" | tee -a "$out/gpu_tests.log"
{
  for d in 64 128; do for p in f16 bf16; do for m in none causal; do
    ./ftattn run --head-dim $d --precision $p --mask $m --batch 2 --heads 4 --seqlen 1000 \
      --seqlen-k 1200 --lse --check-rows 0 --iters 0 | grep -E "kernel|check"
  done; done; done
  ./ftattn run --head-dim 128 --mask block_sparse_causal --sparse-block 128x128 --density 0.5 \
    --batch 2 --heads 4 --seqlen 2048 --check-rows 0 --lse | grep -E "kernel|check|time"
} 2>&1 | tee "$out/run_matrix.log" | grep -c PASS
for cfg in "--head-dim 128 --mask causal" "--head-dim 64 --mask causal" "--head-dim 256" \
           "--head-dim 128 --mask block_sparse --sparse-block 128x128"; do
  for tool in memcheck racecheck; do
    # shellcheck disable=SC2086
    echo "== $tool $cfg: $(compute-sanitizer --tool $tool --error-exitcode 3 ./ftattn run $cfg \
      --batch 1 --heads 2 --seqlen 300 --iters 0 --check-rows 0 2>&1 |
      grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|check' | tr '\n' ' ')"
  done
done 2>&1 | tee "$out/sanitizer.log"
python3 "$here/compare.py" --ftattn ./ftattn --name fwd_grid --out "$out" > "$out/compare.log" 2>&1
echo "compare rc=$?"

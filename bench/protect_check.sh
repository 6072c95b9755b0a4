#!/usr/bin/env bash
# What the GPU owes for the protection work (issue 4), in one call on the device machine:
#   1. the GPU tests of the protected kernels, the decoupled baseline and the campaign runner;
#   2. the overhead table: none, flash_abft, efta_detect, efta_correct and decoupled timed in the
#      same run (EFTA's grid: 16k tokens, hidden 1024 = 16 x d64 and 4096 = 32 x d128);
#   3. campaigns: 10,000 single-bit flips per site into S, P, O and the row sum for efta_correct
#      (the "no silent corruption" goal), every site of every scheme at 2,000 flips (including
#      the sites a scheme cannot see), and false alarms on clean inputs.
#   bash bench/protect_check.sh <folder with ftattn and ftattn_gpu_tests> <results folder> [stage]
# stage: tests, calibrate (thresholds from clean inputs: calibration.csv), bench, goal (the
# efta_correct campaign at the default thresholds, and false alarms), sites (every scheme and
# site), or all (the default); one stage at a time fits a 10-minute command limit.
# Environment: TRIALS (10000), OTHER_TRIALS (2000), CLEAN_RUNS (100), SHAPE (1,2,512: the
# README's campaign table; silent corruptions at the output grow with the keys, see there).
set -o pipefail
bin=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
export FTATTN_CACHE_DIR=${FTATTN_CACHE_DIR:-/tmp/ftattn-cache}
trials=${TRIALS:-10000}
other_trials=${OTHER_TRIALS:-2000}
clean_runs=${CLEAN_RUNS:-100}
shape=${SHAPE:-1,2,512}
stage=${3:-all}
want() { [[ $stage == all || $stage == "$1" ]]; }
cd "$bin"
summary="$out/campaign_summary.csv"
[[ $stage == all || $stage == goal ]] && rm -f "$summary"

if want tests; then
  ./ftattn_gpu_tests "[decoupled],[campaign],[protect]" --durations yes 2>&1 | tail -60 \
    > "$out/protect_gpu_tests.log"
  echo "gpu tests rc=$?" | tee -a "$out/protect_gpu_tests.log"
fi

# The smallest alarm-free value of every check's threshold on clean inputs of five distributions,
# per scheme, precision, head dim, mask and length: the defaults should sit a few times above the
# largest (README, Protection).
if want calibrate; then
  rm -f "$out/calibration.csv"
  for c in "efta_correct f16 128 none 1,2,1024" "efta_correct bf16 128 none 1,2,1024" \
           "efta_correct f16 64 none 1,2,1024" "efta_correct f16 128 causal 1,2,4096" \
           "efta_detect bf16 64 causal 1,2,2048" "flash_abft f16 128 none 1,2,1024" \
           "flash_abft bf16 128 none 1,2,1024"; do
    read -r s p d m sh <<< "$c"
    ./ftattn inject --protection "$s" --precision "$p" --head-dim "$d" --mask "$m" --shape "$sh" \
      --calibrate 4 --calibration-csv "$out/calibration.csv" 2>&1 | grep -vE "^  "
  done > "$out/calibration.log"
  grep -E "^calibration|margin" "$out/calibration.log"
fi

shapes="64,16,512,32;64,16,1024,16;64,16,2048,8;64,16,4096,4;64,16,8192,2;64,16,16384,1"
shapes="$shapes;128,32,512,32;128,32,1024,16;128,32,2048,8;128,32,4096,4;128,32,8192,2"
shapes="$shapes;128,32,16384,1"
if want bench; then
  ./ftattn bench --shapes "$shapes" --precisions f16 --masks none,causal \
    --protection none,flash_abft,efta_detect,efta_correct,decoupled \
    --csv "$out/protect_overhead.csv" > "$out/protect_overhead.log" 2>&1
  echo "overhead bench rc=$?"
fi
# The goal: efta_correct, no silent corruption among $trials flips each into S, P, O, row sum.
if want goal; then
  ./ftattn inject --head-dim 128 --protection efta_correct --site scores,probs,output,row_sum \
    --trials "$trials" --bits 0:31 --shape "$shape" --seed 1 --false-alarms "$clean_runs" \
    --csv "$out/campaign_efta_correct_trials.csv" --summary-csv "$summary" \
    > "$out/campaign_efta_correct.log" 2>&1
  echo "efta_correct campaign rc=$?"
fi
want sites || { [[ -f $summary ]] && tr "," "\t" < "$summary" | cut -c1-220; exit 0; }
# Every site of every scheme, honestly: what each one can and cannot see.
for scheme in none flash_abft efta_detect efta_correct; do
  sites=scores,probs,row_max,row_sum,rescale,output
  [[ $scheme == none ]] || sites=$sites,checksum  # none has no checksum to hit
  ./ftattn inject --head-dim 128 --protection $scheme --site $sites --trials "$other_trials" \
    --shape "$shape" --seed 2 --summary-csv "$summary" > "$out/campaign_$scheme.log" 2>&1
  echo "$scheme campaign rc=$?"
done
./ftattn inject --head-dim 128 --protection decoupled \
  --site scores,probs,row_max,row_sum,output,checksum --trials "$other_trials" \
  --shape "$shape" --seed 2 --false-alarms "$clean_runs" --summary-csv "$summary" \
  > "$out/campaign_decoupled.log" 2>&1
echo "decoupled campaign rc=$?"
for p in bf16; do
  ./ftattn inject --head-dim 128 --precision $p --mask causal --protection efta_correct \
    --site scores,probs,output,row_sum --trials "$other_trials" --shape "$shape" --seed 3 \
    --false-alarms "$clean_runs" --summary-csv "$summary" > "$out/campaign_efta_correct_$p.log" 2>&1
  echo "efta_correct $p causal campaign rc=$?"
done
tr "," "\t" < "$summary" | cut -c1-220

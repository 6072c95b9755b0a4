#!/usr/bin/env bash
# The precision work's GPU run, in one call on the device machine (issue 5): the 8-bit GPU tests,
# compute-sanitizer on small 8-bit runs, the accuracy tables at the papers' sizes and the speed
# comparison of int8, fp8_e4m3 and f16_pasa against f16 in the same run. CSVs under <outdir>,
# plus PNGs when python3 has matplotlib.
#   bash bench/precision_check.sh <folder with ftattn and ftattn_gpu_tests> <outdir>
# Precisions the GPU lacks (fp8 below sm_89) are reported as skipped, not failures.
set -o pipefail
bin=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
export FTATTN_CACHE_DIR=${FTATTN_CACHE_DIR:-/tmp/ftattn-cache} PYTHONUNBUFFERED=1
cd "$bin"
./ftattn --version | tee "$out/device.txt"
./ftattn run --head-dim 64 --batch 1 --heads 1 --seqlen 128 --iters 0 2>&1 | grep device >> "$out/device.txt"

# 1. GPU tests: the 8-bit cases (reference and host-model checks), then everything.
./ftattn_gpu_tests "[q8]" --durations yes 2>&1 | tail -40 > "$out/gpu_tests_q8.log"
echo "q8 gpu tests rc=$?" | tee -a "$out/gpu_tests_q8.log"
./ftattn_gpu_tests "[pasa]" --durations yes 2>&1 | tail -40 > "$out/gpu_tests_pasa.log"
echo "pasa gpu tests rc=$?" | tee -a "$out/gpu_tests_pasa.log"
./ftattn_gpu_tests 2>&1 | tail -20 > "$out/gpu_tests_all.log"
echo "all gpu tests rc=$?" | tee -a "$out/gpu_tests_all.log"

# 2. Reference checks and sanitizers on small 8-bit runs (odd lengths, GQA, LSE).
{
  for p in int8 fp8_e4m3; do for d in 64 128 256; do for m in none causal; do
    ./ftattn run --precision $p --head-dim $d --mask $m --batch 2 --heads 4 --heads-kv 2 \
      --seqlen 1000 --seqlen-k 1203 --lse --check-rows 0 --iters 0 2>&1 | grep -E "kernel|check|error"
  done; done; done
} | tee "$out/q8_run_matrix.log" | grep -c PASS
for p in int8 fp8_e4m3; do for tool in memcheck racecheck; do
  echo "== $tool $p: $(compute-sanitizer --tool $tool --error-exitcode 3 ./ftattn run \
    --precision $p --head-dim 128 --mask causal --batch 1 --heads 2 --seqlen 300 --seqlen-k 333 \
    --iters 0 --check-rows 0 2>&1 | grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|check|error' |
    tr '\n' ' ')"
done; done | tee "$out/q8_sanitizer.log"

# 3. Accuracy against FP64 (the golden output of the stored 16-bit inputs).
acc="$out/accuracy.csv"
rm -f "$acc" "$out/accuracy_pasa.csv"
# INT-FlashAttention's tables: N(0,1) and U(-0.5,0.5), seqlen 1k-16k, head dim 64 (their code) and
# 128. Batch 1 x 8 heads instead of their 4 x 32: per-element metrics do not depend on it, and the
# host draws the inputs; 4096 rows sampled evenly for the FP64 reference.
for d in 64 128; do for s in 1024 2048 4096 8192 16384; do
  for dist in normal uniform; do for p in f16 int8 fp8_e4m3; do
    ./ftattn accuracy --precision $p --head-dim $d --dist $dist --batch 1 --heads 8 --seqlen $s \
      --rows 4096 --csv "$acc" 2>&1 | grep -E "accuracy|error" | sed "s/^/$p d$d s$s $dist: /"
  done; done
done; done | tee "$out/accuracy.log"
# PASA's cases (1, 16, 1280, 128): the overflow table (Table 4) and the x0 / Am sweeps, for FP16
# scores (host model of FA(FP16-FP32)), our f16 kernel (FP32 scores) and f16_pasa.
pasa="$out/accuracy_pasa.csv"
cases="pasa-uniform:30:0.5 pasa-uniform:20:15 pasa-uniform:20:20 pasa-hybrid:30:10 pasa-hybrid:20:50 pasa-hybrid:20:100"
for x in 0 5 10 15 20 25; do cases="$cases pasa-uniform:$x:0.5 pasa-hybrid:$x:10"; done
for am in 1 2 5 10; do cases="$cases pasa-uniform:20:$am"; done
for c in $cases; do
  IFS=: read -r dist x0 am <<< "$c"
  ./ftattn accuracy --model fp16-scores --head-dim 128 --dist $dist --x0 $x0 --am $am \
    --batch 1 --heads 16 --seqlen 1280 --csv "$pasa" 2>&1 | grep -E "accuracy" | sed "s/^/fp16-scores $c: /"
  for p in f16 f16_pasa; do
    ./ftattn accuracy --precision $p --head-dim 128 --dist $dist --x0 $x0 --am $am \
      --batch 1 --heads 16 --seqlen 1280 --csv "$pasa" 2>&1 | grep -E "accuracy|error" | sed "s/^/$p $c: /"
  done
done | tee "$out/accuracy_pasa.log"

# 4. Speed, same run: f16 against int8, fp8_e4m3 and f16_pasa at seqlen >= 4k (16k tokens and
# more), both masks. 8-bit times include quantising Q, K and V from f16 (Kernel::launch does it).
./ftattn bench --precisions f16,int8,fp8_e4m3,f16_pasa --masks none,causal \
  --shapes "64,32,4096,4;128,32,4096,4;64,32,8192,2;128,32,8192,2;128,32,16384,1;256,16,8192,1" \
  --csv "$out/precision_speed.csv" 2>&1 | tee "$out/precision_speed.log"

# 4b. f16_pasa against f16 in the same run, at PASA's default tiles and at a few others (the
# defaults come from an H100 sweep, bench/results/nvidia-h100/pasa_tiles.csv): the shift kernel
# is included in its time.
./ftattn bench --precisions f16,f16_pasa --masks none,causal \
  --shapes "64,32,4096,4;128,32,4096,4;128,32,8192,2;128,32,16384,1;256,16,8192,1" \
  --csv "$out/pasa_speed.csv" 2>&1 | tee "$out/pasa_speed.log"
./ftattn bench --precisions f16_pasa --masks none,causal --shapes "128,32,8192,2" \
  --tiles 128x32w4s1,128x64w4s1,128x64w4s2,64x64w4s1,64x128w4s2,128x32w8s2 \
  --csv "$out/pasa_tiles.csv" 2>&1 | tee "$out/pasa_tiles.log"
python3 - "$out" <<'PY'
import csv, sys
out = sys.argv[1]
ms = {}
for r in csv.DictReader(open(f"{out}/pasa_speed.csv")):
    ms[(r["head_dim"], r["seqlen"], r["causal"], r["dtype"])] = float(r["ms"])
print("head_dim,seqlen,causal,f16_ms,f16_pasa_ms,speedup_vs_f16")
for (d, s, c, p), t in sorted(ms.items()):
    if p == "f16_pasa" and (d, s, c, "f16") in ms:
        print(f"{d},{s},{c},{ms[(d, s, c, 'f16')]:.4f},{t:.4f},{ms[(d, s, c, 'f16')] / t:.3f}")
PY
grep -E "f16_pasa|f16-pasa" "$out/accuracy_pasa.log" | grep -E "NaN" | head -40

# 5. Tables and plots.
python3 - "$out" <<'PY'
import csv, sys, collections
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/precision_speed.csv")))
ms = {(r["head_dim"], r["seqlen"], r["causal"], r["dtype"]): float(r["ms"]) for r in rows}
with open(f"{out}/precision_speedup.csv", "w") as f:
    f.write("head_dim,seqlen,causal,dtype,ms,f16_ms,speedup_vs_f16\n")
    for (d, s, c, p), t in sorted(ms.items()):
        base = ms.get((d, s, c, "f16"))
        if base and p != "f16":
            f.write(f"{d},{s},{c},{p},{t:.4f},{base:.4f},{base / t:.3f}\n")
print(open(f"{out}/precision_speedup.csv").read())
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("matplotlib not available: no PNG")
    sys.exit(0)
sp = list(csv.DictReader(open(f"{out}/precision_speedup.csv")))
fig, ax = plt.subplots(figsize=(10, 4))
labels = [f"d{r['head_dim']} s{r['seqlen']}{' c' if r['causal'] == '1' else ''}" for r in sp if r["dtype"] == "int8"]
for i, p in enumerate(["int8", "fp8_e4m3", "f16_pasa"]):
    ys = [float(r["speedup_vs_f16"]) for r in sp if r["dtype"] == p]
    if ys:
        ax.bar([x + 0.27 * i for x in range(len(ys))], ys, width=0.27, label=p)
ax.axhline(1.0, color="k", lw=0.8)
ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
ax.set_ylabel("speed-up over f16")
ax.legend()
fig.tight_layout()
fig.savefig(f"{out}/precision_speedup.png", dpi=120)
acc = [r for r in csv.DictReader(open(f"{out}/accuracy.csv"))]
fig, axes = plt.subplots(1, 2, figsize=(10, 4))
for ax, dist in zip(axes, ["normal", "uniform"]):
    series = collections.defaultdict(list)
    for r in acc:
        if r["dist"] == dist and r["head_dim"] == "64":
            series[r["run"].split("_")[3]].append((int(r["seqlen"]), float(r["mre"])))
    for name, pts in series.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_title(f"MRE, {dist}, head dim 64")
    ax.legend()
fig.tight_layout()
fig.savefig(f"{out}/accuracy_mre.png", dpi=120)
PY

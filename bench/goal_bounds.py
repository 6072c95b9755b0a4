#!/usr/bin/env python3
"""Which speed goals of issues 4 and 5 the current designs cannot reach, on the host (no GPU).

Each scheme or precision that misses its goal pays for a separate pass over memory before the
attention kernel: Flash-ABFT's checksum prologue reads V, EFTA's reads K and V, f16_pasa's shift
reads K and writes K', the 8-bit precisions' quantisation reads K and V in 16 bits and writes
them in 8 (and Q at head dim 256). A separate pass takes at least its bytes over the GPU's peak
DRAM bandwidth, whatever the attention kernel does. Those floors, against the measured times of
the baselines (our unprotected and f16 kernels, timed in turn with the others by `ftattn bench
--interleave`), say:

  protection   floor % = the pass at peak bandwidth / unprotected time; above the goal, no kernel
               can meet it while the pass stays a separate read of memory.
  f16_pasa     the speed-up PASA's attention kernel needs over f16's so that the shift pass
               at peak bandwidth still leaves 1.0x end to end.
  int8, fp8    the speed-up over f16 the attention alone needs so that the quantisation at
               peak bandwidth still leaves the goal end to end, beside the measured one.

  tiles        the checksum tiles' share of the MMAs (n8 tiles beside GEMM I's block_n keys and
               GEMM II's head_dim channels): the overhead with checksums prepared once when the
               checked kernel keeps the tensor cores as busy as the unprotected one. The
               three-consumer default is that bound (ncu: tensor pipe active 81% of its cycles,
               80.5% with Flash-ABFT, whose tensor-active cycles grow by exactly its 1/32), so a
               share above the goal is met only by a checked kernel that keeps the tensor cores
               busier than the unprotected one.

  issue        from ncu logs of the attention kernels (`--ncu`, one shape, unprotected f16 among
               them): the share of its cycles each scheduler must issue an instruction in for the
               kernel, executing the instructions it executes now, to run in the goal's time
               (f16's time over the speed goal, or the unprotected time plus the overhead goal),
               at the clock ncu saw it run and at the GPU's highest. A share near or above what
               the kernel issues now says the goal needs fewer instructions, not only less
               waiting.

    python3 bench/goal_bounds.py --out bench/results/host/goal_bounds.csv
    python3 bench/goal_bounds.py --ncu bench/results/nvidia-h200/logs/ncu_issue_*_1.txt \\
        --out bench/results/nvidia-h200/goal_issue_bounds.csv
"""
import argparse
import csv
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
H100 = os.path.join(HERE, "results", "nvidia-h100")
# H100 SXM5 80 GB: HBM3 peak bandwidth (NVIDIA's data sheet).
BANDWIDTH = 3.35e12

GOALS = {"flash_abft": 3.0, "efta_detect": 8.0, "efta_correct": 12.0,
         "int8": 1.6, "fp8_e4m3": 1.5, "f16_pasa": 1.0}


def tensor_bytes(r, element_bytes):
    """One of Q, K, V of the bench's shape (heads = KV heads there) at element_bytes each."""
    return int(r["batch"]) * int(r["heads"]) * int(r["seqlen"]) * int(r["head_dim"]) * element_bytes


def protection_floor(r, scheme):
    """The checksum prologue at peak bandwidth, in ms: V (Flash-ABFT), K and V (EFTA)."""
    pass_bytes = tensor_bytes(r, 2) * (1 if scheme == "flash_abft" else 2)
    return 1e3 * pass_bytes / BANDWIDTH


def quantize_floor(r):
    """The 8-bit quantisation pass at peak bandwidth, in ms: K and V read in 16 bits and written
    in 8, Q too at head dim 256 (fused into the kernel at 64 and 128)."""
    tensors = 3 if int(r["head_dim"]) == 256 else 2
    return 1e3 * tensors * tensor_bytes(r, 3) / BANDWIDTH


def shift_floor(r):
    """f16_pasa's shift at peak bandwidth, in ms: K read, K' written, 16 bits each."""
    return 1e3 * 2 * tensor_bytes(r, 2) / BANDWIDTH


# The n8 checksum tiles each scheme adds to GEMM I (beside its block_n keys) and to GEMM II (beside
# its head_dim channels): kernel/fwd_sm90.cuh's score_checksum_tiles and checksum_tiles.
TILES = {"flash_abft": (0, 1), "efta_detect": (1, 1), "efta_correct": (1, 2)}


def tile_share(scheme, head_dim, block_n=128):
    """The tiles' extra MMA work over the unprotected kernel's: GEMM I and GEMM II do the same
    flops per block (rows x block_n x head_dim each), so each GEMM's widening weighs half."""
    gemm1, gemm2 = TILES[scheme]
    return (8 * gemm1 / block_n + 8 * gemm2 / head_dim) / 2


def tile_rows(head_dims=(128,)):
    out = []
    for scheme in TILES:
        for d in head_dims:
            share = 100 * tile_share(scheme, d)
            out.append(dict(target=f"{scheme} tiles", head_dim=str(d), seqlen="", batch="",
                            heads="", causal="", baseline_ms="", floor_ms="",
                            needed=f"{share:.2f}%", goal=f"{GOALS[scheme]:.0f}%", measured="",
                            verdict="share above goal" if share > GOALS[scheme]
                            else "share below goal"))
    return out


def medians(rows, value):
    """{(head_dim, seqlen, batch, heads, causal, dtype, protection): median of value} over runs."""
    keys = ("head_dim", "seqlen", "batch", "heads", "causal", "dtype", "protection")
    out = {}
    for r in rows:
        if r.get("passed", "1") == "1":
            out.setdefault(tuple(r[k] for k in keys), []).append(float(r[value]))
    return {k: statistics.median(v) for k, v in out.items()}


def shape_of(key):
    return dict(zip(("head_dim", "seqlen", "batch", "heads", "causal"), key[:5]))


def protection_rows(rows):
    ms = medians(rows, "ms")
    out = []
    for key, t in sorted(ms.items(), key=lambda kv: (kv[0][6], kv[0][4], int(kv[0][1]))):
        scheme = key[6]
        none = ms.get(key[:6] + ("none",))
        if scheme == "none" or none is None:
            continue
        r = shape_of(key)
        floor = protection_floor(r, scheme)
        out.append(dict(r, target=scheme, baseline_ms=f"{none:.4f}", floor_ms=f"{floor:.4f}",
                        needed=f"{100 * floor / none:.2f}%", goal=f"{GOALS[scheme]:.0f}%",
                        measured=f"{100 * (t / none - 1):.2f}%",
                        verdict="floor above goal" if 100 * floor / none > GOALS[scheme]
                        else "floor below goal"))
    return out


def precision_rows(rows):
    ms, attention = medians(rows, "ms"), medians(rows, "attention_ms")
    out = []
    for key, t in sorted(ms.items(), key=lambda kv: (kv[0][5], int(kv[0][0]), kv[0][4],
                                                      int(kv[0][1]))):
        precision = key[5]
        f16 = ms.get(key[:5] + ("f16",) + key[6:])
        if precision == "f16" or f16 is None:
            continue
        r = shape_of(key)
        goal = GOALS[precision]
        if precision == "f16_pasa":
            floor = shift_floor(r)
            needed = f16 / (f16 / goal - floor)  # PASA's kernel over f16's
            measured = f"{f16 / t:.3f} end to end"
        else:
            floor = quantize_floor(r)
            budget = f16 / goal - floor
            needed = f16 / budget if budget > 0 else float("inf")
            measured = f"{f16 / attention[key]:.3f} attention" if attention.get(key) else ""
        out.append(dict(r, target=precision, baseline_ms=f"{f16:.4f}", floor_ms=f"{floor:.4f}",
                        needed=f"{needed:.3f}x", goal=f"{goal:.1f}x", measured=measured,
                        verdict=""))
    return out


# ncu's metrics of the issue bound, as `ncu --metrics` names them.
NCU_METRICS = ("smsp__inst_executed.sum", "sm__cycles_elapsed.avg", "gpu__time_duration.sum",
               "smsp__issue_active.avg.pct_of_peak_sustained_active",
               "device__attribute_multiprocessor_count",
               "device__attribute_max_gpu_frequency_khz")
_KERNEL = re.compile(r"^\s*(ftattn_fwd_\w+?) \(\d+, \d+, \d+\)x\(\d+, \d+, \d+\)")
_NAME = re.compile(r"^ftattn_fwd_sm\d+a?_(\w+?)_d(\d+)_m\d+n\d+_w\d+s\d+_(none|causal)_(\w+)$")
_TIME_UNITS = {"ns": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0, "msecond": 1.0, "s": 1e3}


def parse_ncu(text):
    """{kernel, precision, head_dim, mask, protection, and NCU_METRICS as floats (the duration in
    ms)} of the first attention kernel in an `ncu --metrics` text log; None without one."""
    out, in_kernel = {}, False
    for line in text.splitlines():
        m = _KERNEL.match(line)
        if m:
            if in_kernel:
                break
            in_kernel = True
            out["kernel"] = m.group(1)
            continue
        fields = line.split()
        if in_kernel and fields and fields[0] in NCU_METRICS:
            value = float(fields[-1].replace(",", ""))
            if fields[0] == "gpu__time_duration.sum":
                value *= _TIME_UNITS[fields[1]]
            out[fields[0]] = value
    if not in_kernel or any(k not in out for k in NCU_METRICS):
        return None
    name = _NAME.match(out["kernel"])
    if not name:
        return None
    out.update(precision=name.group(1), head_dim=name.group(2), mask=name.group(3),
               protection=name.group(4))
    return out


def issue_rows(records):
    """The issue bound of each kernel against the unprotected f16 one of the same head dim and
    mask among the records (parse_ncu's)."""
    base = {(r["head_dim"], r["mask"]): r for r in records
            if r["precision"] == "f16" and r["protection"] == "none"}
    out = []
    for r in records:
        f16 = base.get((r["head_dim"], r["mask"]))
        target = r["protection"] if r["protection"] != "none" else r["precision"]
        if f16 is None or r is f16 or target not in GOALS:
            continue
        goal = GOALS[target]
        f16_ms = f16["gpu__time_duration.sum"]
        goal_ms = f16_ms * (1 + goal / 100) if r["protection"] != "none" else f16_ms / goal
        ms = r["gpu__time_duration.sum"]
        schedulers = 4 * r["device__attribute_multiprocessor_count"]
        per_scheduler = r["smsp__inst_executed.sum"] / schedulers
        clock = r["sm__cycles_elapsed.avg"] / (ms * 1e-3)  # Hz, as the kernel ran
        top = r["device__attribute_max_gpu_frequency_khz"] * 1e3
        needed = 100 * per_scheduler / (goal_ms * 1e-3 * clock)
        needed_top = 100 * per_scheduler / (goal_ms * 1e-3 * top)
        measured = r["smsp__issue_active.avg.pct_of_peak_sustained_active"]
        goal_text = f"+{goal:.0f}%" if r["protection"] != "none" else f"{goal:.1f}x"
        out.append(dict(target=f"{target} issue", head_dim=r["head_dim"], seqlen="", batch="",
                        heads="", causal="1" if r["mask"] == "causal" else "0",
                        baseline_ms=f"{f16_ms:.4f}", floor_ms=f"{goal_ms:.4f}",
                        needed=f"{needed:.1f}% at {clock / 1e9:.2f} GHz, {needed_top:.1f}% at "
                               f"{top / 1e9:.2f}",
                        goal=goal_text, measured=f"{measured:.1f}% issuing, {ms:.4f} ms",
                        verdict="more than it issues now" if needed > measured
                        else "no more than now"))
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--overheads", default=os.path.join(H100, "protect_overhead_interleaved.csv"))
    ap.add_argument("--precisions", default=os.path.join(H100, "precision_interleaved.csv"))
    ap.add_argument("--ncu", nargs="+", help="ncu text logs: the issue bound alone")
    ap.add_argument("--out", help="CSV to write")
    args = ap.parse_args(argv)
    if args.ncu:
        records = [parse_ncu(open(f).read()) for f in args.ncu]
        if None in records:
            print("no attention kernel with every metric in",
                  [f for f, r in zip(args.ncu, records) if r is None], file=sys.stderr)
            return 2
        table = issue_rows(records)
    else:
        table = protection_rows(list(csv.DictReader(open(args.overheads))))
        table += precision_rows(list(csv.DictReader(open(args.precisions))))
        table += tile_rows()
    fields = ["target", "head_dim", "seqlen", "batch", "heads", "causal", "baseline_ms",
              "floor_ms", "needed", "goal", "measured", "verdict"]
    print(" ".join(f"{f:>13}" for f in fields))
    for row in table:
        print(" ".join(f"{row[f]:>13}" for f in fields))
    if args.out:
        with open(args.out, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(table)
        print("wrote", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""A/B of ftattn builds on the GPU: the same `ftattn bench` sweep run by each build in alternating
rounds, so slow drifts of clocks and temperature fall on every build alike. Each build keeps its
own kernel cache. Writes one CSV (a row per build, round and kernel, with the bench's columns)
and prints, per kernel, each build's median over rounds and its speed against the first build.

    python3 bench/ab.py --bin base=build/ftattn --bin late_v=other/ftattn --rounds 3 \\
        --out bench/results/<gpu>/late_v.csv -- --shapes "128,32,512,32" --tiles 128x64w4s2

Everything after `--` goes to `ftattn bench` as given. Where the bench times protection schemes
beside `none` (`--protection none,flash_abft,...`, best with `--interleave`), a second table gives
each build's median overhead against its own unprotected kernel. Exits 1 if any kernel failed
its reference check, 2 on bad arguments.
"""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile

from results_csv import prepared_flag


def parse_bins(specs):
    bins = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"ab.py: --bin wants NAME=PATH, got '{spec}'")
        if any(name == n for n, _ in bins):
            raise SystemExit(f"ab.py: build name '{name}' given twice")
        bins.append((name, path))
    if len(bins) < 2:
        raise SystemExit("ab.py: give at least two --bin NAME=PATH to compare")
    return bins


def run_bench(path, bench_args, cache_dir):
    cmd = [path, "bench", "--csv", "-"] + bench_args
    env = dict(os.environ, FTATTN_CACHE_DIR=cache_dir)
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0 and not out.stdout.strip():
        sys.stderr.write(out.stderr)
        raise SystemExit(f"ab.py: '{' '.join(cmd)}' failed with exit code {out.returncode}")
    return list(csv.DictReader(out.stdout.splitlines()))


# A kernel's identity across builds: the shape, and the config and scheme it ran.
KEY = ("head_dim", "seqlen", "batch", "heads", "causal", "dtype", "config", "protection",
       "prepared_kv")


def key_of(r):
    """A kernel's row key: a kernel timed with K and V prepared once (bench --prepare-kv) is a
    row of its own beside the same kernel per call (CSVs before that column: per call)."""
    return tuple(prepared_flag(r) if k == "prepared_kv" else r[k] for k in KEY)


def kernel_label(key, with_protection=False):
    protection = "" if key[7] == "none" and not with_protection else " " + key[7]
    return key[6] + protection + (" prepared" if key[8] == "1" else "")


def sort_key(k):
    return (int(k[0]), k[6], k[7], k[4], k[8], int(k[1]))


def summarize(rows, names):
    """{key: {build: median ms}} over rounds. Runs that failed their reference check (ms 0)
    are left out: their build shows '-' and the failure is reported at the end."""
    times = {}
    for r in rows:
        if r.get("passed") != "1":
            continue
        key = key_of(r)
        times.setdefault(key, {}).setdefault(r["build"], []).append(float(r["ms"]))
    return {k: {b: statistics.median(v) for b, v in per.items()} for k, per in times.items()}


def overheads(rows):
    """{key: {build: median overhead}} of the protected kernels, from the bench's own
    overhead_vs_none (against `none` of the same shape, build and round; with --interleave, timed
    in turn with it). Rows whose shape had no `none` timed beside them are left out."""
    shape = ("head_dim", "seqlen", "batch", "heads", "causal", "dtype", "build", "round")
    timed_none = {tuple(r[k] for k in shape) for r in rows
                  if r.get("protection", "none") == "none" and r.get("passed") == "1"}
    out = {}
    for r in rows:
        if r.get("protection", "none") == "none" or r.get("passed") != "1":
            continue
        if tuple(r[k] for k in shape) not in timed_none:
            continue
        key = key_of(r)
        out.setdefault(key, {}).setdefault(r["build"], []).append(float(r["overhead_vs_none"]))
    return {k: {b: statistics.median(v) for b, v in per.items()} for k, per in out.items()}


def plot(summary, names, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("ab.py: no matplotlib, no plot", file=sys.stderr)
        return
    keys = sorted(summary, key=sort_key)
    fig, ax = plt.subplots(figsize=(max(8, 0.6 * len(keys)), 4))
    width = 0.8 / (len(names) - 1)
    shown = []
    for i, name in enumerate(names[1:]):
        ys = [summary[k][names[0]] / summary[k][name]
              if names[0] in summary[k] and name in summary[k] else 0 for k in keys]
        shown += [y for y in ys if y > 0]
        ax.bar([x + i * width for x in range(len(keys))], ys, width, label=name)
    ax.axhline(1.0, ls=":", lw=1, color="gray")
    ax.set_xticks([x + width * (len(names) - 2) / 2 for x in range(len(keys))])
    ax.set_xticklabels([f"d{k[0]} s{k[1]} {k[5]} {'causal' if k[4] == '1' else 'none'}"
                        f"{'' if k[7] == 'none' else ' ' + k[7]}"
                        f"{' prepared' if k[8] == '1' else ''}" for k in keys],
                       fontsize=7, rotation=90)
    ax.set_ylabel(f"speed against {names[0]}")
    # Ratios sit near 1: start the axis just below the lowest (a missing one is a bar at 0).
    ax.set_ylim(bottom=min([0.9] + [y - 0.05 for y in shown]))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print("wrote", path)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", action="append", default=[], metavar="NAME=PATH",
                    help="a build to time; the first is the baseline")
    ap.add_argument("--rounds", type=int, default=3, help="alternating sweeps (default 3)")
    ap.add_argument("--out", help="CSV to write; a PNG goes beside it")
    ap.add_argument("--from-csv", metavar="CSV",
                    help="time nothing: print the tables of a CSV this script wrote and redraw "
                         "the PNG beside it (builds in the order they appear)")
    ap.add_argument("--caches", metavar="DIR",
                    help="kernel caches as DIR/NAME per build, kept (default: a temporary "
                         "directory); a cache compiled beforehand keeps NVRTC out of the run")
    ap.add_argument("bench_args", nargs="*", help="after --: arguments for ftattn bench")
    args = ap.parse_args(argv)
    if args.from_csv:
        if args.bin or args.out or args.bench_args:
            raise SystemExit("ab.py: --from-csv takes no --bin, --out or bench arguments")
        rows = list(csv.DictReader(open(args.from_csv)))
        names = list(dict.fromkeys(r["build"] for r in rows))
        if len(names) < 2:
            raise SystemExit(f"ab.py: {args.from_csv} holds fewer than two builds")
        return report(rows, names, args.from_csv)
    if not args.out:
        raise SystemExit("ab.py: --out names the CSV to write (or give --from-csv)")
    if args.rounds < 1:
        raise SystemExit("ab.py: --rounds must be at least 1")
    bins = parse_bins(args.bin)
    names = [n for n, _ in bins]

    rows = []
    with tempfile.TemporaryDirectory(prefix="ftattn-ab-") as temporary:
        caches = args.caches or temporary
        for rnd in range(args.rounds):
            # Rotate the order each round: no build always runs first on a cold GPU.
            order = bins[rnd % len(bins):] + bins[:rnd % len(bins)]
            for name, path in order:
                for r in run_bench(path, args.bench_args, os.path.join(caches, name)):
                    rows.append(dict(r, build=name, round=rnd + 1))
            print(f"round {rnd + 1} of {args.rounds} done", flush=True)
    if not rows:
        raise SystemExit("ab.py: the bench produced no rows (every config skipped?)")

    fields = ["build", "round"] + [f for f in rows[0] if f not in ("build", "round")]
    with open(args.out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    print("wrote", args.out)
    return report(rows, names, args.out)


def report(rows, names, csv_path):
    """Prints the speed and overhead tables, draws the PNG beside the CSV; 1 if any kernel failed
    its reference check."""
    summary = summarize(rows, names)
    print(f"{'kernel':<58} {'shape':<18}" + "".join(f" {n[:14]:>14}" for n in names))
    for key in sorted(summary, key=sort_key):
        per = summary[key]
        base = per.get(names[0])
        cells = [f"{per[names[0]]:11.4f} ms" if base else f"{'-':>14}"]
        for n in names[1:]:
            cells.append(f"{base / per[n]:13.3f}x" if base and n in per else f"{'-':>14}")
        shape = f"s{key[1]} b{key[2]} h{key[3]}"
        print(f"{kernel_label(key):<58} {shape:<18} " + " ".join(cells))
    over = overheads(rows)
    if over:
        print("overhead against each build's own unprotected kernel (median over rounds)")
        for key in sorted(over, key=sort_key):
            per = over[key]
            cells = [f"{100 * per[n]:+13.1f}%" if n in per else f"{'-':>14}" for n in names]
            shape = f"s{key[1]} b{key[2]} h{key[3]}"
            print(f"{kernel_label(key, True):<58} {shape:<18} " + " ".join(cells))
    plot(summary, names, os.path.splitext(csv_path)[0] + ".png")

    failed = [r for r in rows if r.get("passed") != "1"]
    for r in failed:
        print(f"CHECK FAILED: {r['build']} round {r['round']} {r['config']} s{r['seqlen']}",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

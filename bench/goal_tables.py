#!/usr/bin/env python3
"""The issues' goal tables from bench CSVs: each protection scheme's time over the unprotected
kernel, and each precision's speed over f16, per shape, as the min and max over runs (with
--median, the median over runs before them). Every
ratio is taken within one run (the same CSV, or the same build and round of an ab.py CSV) against
its peer of the same shape, so drift between runs never enters it.

    python3 bench/goal_tables.py bench/results/nvidia-h100 \\
        "protected_store_rows_ab.csv#build=new,round=1" "protected_store_rows_ab.csv#build=new,round=2"

Rounds of one A/B run drift apart by a point or more, so over many rounds the median says more
than the range: --median prints "median (min to max)".

Prints Markdown: an overhead table (per call and, with bench --prepare-kv, K and V prepared
once) and a speed table (end to end and, where the bench timed it apart, the attention kernel
alone, quantisation excluded). Exits 2 if a CSV is missing or no ratio can be formed.
"""
import argparse
import statistics
import sys

from results_csv import prepared_flag, rows

SHAPE = ("head_dim", "seqlen", "batch", "heads", "causal")


def shape_of(r):
    return tuple(r[k] for k in SHAPE)


def passed(r):
    return r.get("passed", "1") == "1" and float(r["ms"]) > 0


def ratios(run):
    """{(table, row key, seqlen): ratio} of one run. Overheads: a protected kernel against the
    unprotected kernel of its dtype and shape. Speeds: a precision's unprotected kernel against
    f16's of the shape (and its attention kernel alone, where timed apart)."""
    base = {}
    for r in run:
        if passed(r) and r.get("protection", "none") == "none" and prepared_flag(r) == "0":
            base[(r["dtype"],) + shape_of(r)] = float(r["ms"])
    out = {}
    for r in run:
        if not passed(r):
            continue
        mask = "causal" if r["causal"] == "1" else "none"
        prepared = prepared_flag(r) == "1"
        protection = r.get("protection", "none")
        ms = float(r["ms"])
        if protection != "none":
            none = base.get((r["dtype"],) + shape_of(r))
            if none:
                key = (r["dtype"], int(r["head_dim"]), protection, mask,
                       "prepared" if prepared else "per call")
                out[("overhead", key, int(r["seqlen"]))] = 100 * (ms / none - 1)
        elif r["dtype"] != "f16":
            f16 = base.get(("f16",) + shape_of(r))
            if f16:
                key = (r["dtype"], int(r["head_dim"]), mask, "prepared" if prepared else "per call")
                out[("speed", key + ("end to end",), int(r["seqlen"]))] = f16 / ms
                attention = float(r.get("attention_ms") or 0)
                if attention > 0:
                    out[("speed", key + ("attention alone",), int(r["seqlen"]))] = f16 / attention
    return out


def cell(values, fmt, median=False):
    lo, hi = fmt(min(values)), fmt(max(values))
    spread = lo if lo == hi else f"{lo} to {hi}"
    return f"{fmt(statistics.median(values))} ({spread})" if median else spread


def table(per_run, which, header, fmt, median=False):
    keys = sorted({k for run in per_run for (t, k, _) in run if t == which})
    seqlens = sorted({s for run in per_run for (t, _, s) in run if t == which})
    if not keys:
        return []
    lines = ["| " + " | ".join(header + ["runs"] + [f"{s // 1024}k" if s % 1024 == 0 else str(s)
                                                   for s in seqlens]) + " |",
             "|" + "---|" * (len(header) + 1 + len(seqlens))]
    for k in keys:
        values = {s: [run[(which, k, s)] for run in per_run if (which, k, s) in run]
                  for s in seqlens}
        runs = max(len(v) for v in values.values())
        # A cell from fewer runs than its row's says how many.
        cells = [(cell(v, fmt, median) + (f" ({len(v)} runs)" if len(v) < runs else ""))
                 if v else "" for v in values.values()]
        lines.append("| " + " | ".join([str(x) for x in k] + [str(runs)] + cells) + " |")
    return lines


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("folder", help="the results folder the runs are in")
    ap.add_argument("runs", nargs="+", help="CSV names, each a run; file.csv#build=B,round=R "
                                            "selects one build and round of an ab.py CSV")
    ap.add_argument("--median", action="store_true",
                    help="each cell as the median over runs, then min to max")
    args = ap.parse_args(argv)
    per_run = []
    for name in args.runs:
        data = rows(args.folder, name)
        if data is None:
            print(f"goal_tables.py: no {name.partition('#')[0]} in {args.folder}", file=sys.stderr)
            return 2
        if not data:
            print(f"goal_tables.py: {name} selects no rows", file=sys.stderr)
            return 2
        per_run.append(ratios(data))
    overhead = table(per_run, "overhead", ["dtype", "head dim", "scheme", "mask", "K and V"],
                     lambda v: f"{v:+.1f}%", args.median)
    speed = table(per_run, "speed", ["dtype", "head dim", "mask", "K and V", "timed"],
                  lambda v: f"{v:.2f}x", args.median)
    if not overhead and not speed:
        print("goal_tables.py: no protected or non-f16 kernel beside its peer in these runs",
              file=sys.stderr)
        return 2
    print(f"{len(per_run)} run(s); " +
          ("median (min to max) over them." if args.median else "min to max over them."))
    if overhead:
        print("\nTime over the unprotected kernel of the same run:\n")
        print("\n".join(overhead))
    if speed:
        print("\nSpeed over f16 of the same run:\n")
        print("\n".join(speed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

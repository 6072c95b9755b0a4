#!/usr/bin/env python3
"""PNG plots beside the CSVs a GPU run leaves in bench/results/<gpu>/ (grids have their own, from
compare.py): protection overhead, other precisions against f16, tile sweeps, IR-level campaign
outcomes. A CSV that is missing is skipped.

    python3 bench/plot_results.py bench/results/nvidia-h100
"""
import statistics
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from results_csv import prepared_flag, rows  # noqa: E402


def save(fig, folder, name):
    fig.tight_layout()
    fig.savefig(os.path.join(folder, name), dpi=120)
    plt.close(fig)
    print("wrote", os.path.join(folder, name))


def label_groups(ax, width, bars_per_group, labels, **kw):
    """Ticks under the middle of each group of bars_per_group side-by-side bars."""
    ax.set_xticks([x + width * (bars_per_group - 1) / 2 for x in range(len(labels))])
    ax.set_xticklabels(labels, **kw)


def shape_label(head_or_dtype, seqlen, causal):
    return f"{head_or_dtype} {seqlen}\n{'causal' if causal == '1' else 'none'}"


def protect_overhead(folder, name="protect_overhead", schemes=("flash_abft", "efta_detect",
                                                                 "efta_correct")):
    """Each scheme's time over the unprotected kernel of the same run, per shape."""
    data = rows(folder, name + ".csv")
    if not data:
        return
    data = [r for r in data if r["dtype"] == data[0]["dtype"]]  # one precision per plot
    ms = {(r["head_dim"], r["seqlen"], r["causal"], r["protection"]): float(r["ms"]) for r in data}
    shapes = sorted({k[:3] for k in ms}, key=lambda x: (int(x[0]), x[2], int(x[1])))
    fig, ax = plt.subplots(figsize=(max(9, len(shapes)), 4))
    width = 0.8 / len(schemes)
    for i, scheme in enumerate(schemes):
        ys = [100 * (ms[k + (scheme,)] / ms[k + ("none",)] - 1) if k + (scheme,) in ms else 0
              for k in shapes]
        ax.bar([x + i * width for x in range(len(shapes))], ys, width, label=scheme)
    for goal in (3, 8, 12):
        ax.axhline(goal, ls=":", lw=1, color="gray")
    label_groups(ax, width, len(schemes), [shape_label(f"d{d}", s, c) for d, s, c in shapes])
    ax.set_ylabel("time over unprotected (%)")
    precision = data[0]["dtype"]
    ax.set_title(f"Protection overhead, {precision} (dotted: the goals 3/8/12%)")
    ax.legend()
    save(fig, folder, name + ".png")


def speed_vs_f16(folder, name, goals=()):
    """Each precision of <name>.csv against our f16 kernel on the same shapes (same run)."""
    data = rows(folder, name + ".csv")
    if not data:
        return
    ms = {(r["head_dim"], r["seqlen"], r["causal"], r["dtype"]): float(r["ms"]) for r in data}
    # 8-bit rows may also carry the attention alone (operands quantised beforehand).
    attention = {(r["head_dim"], r["seqlen"], r["causal"], r["dtype"]): float(r["attention_ms"])
                 for r in data if float(r.get("attention_ms") or 0) > 0}
    precisions = sorted({k[3] for k in ms if k[3] != "f16"})
    keys = sorted({k[:3] for k in ms if k[:3] + ("f16",) in ms},
                  key=lambda k: (int(k[0]), int(k[1]), k[2]))
    fig, ax = plt.subplots(figsize=(max(8, len(keys) * 0.9), 3.8))
    width = 0.8 / max(1, len(precisions))
    for i, prec in enumerate(precisions):
        ys = [ms[k + ("f16",)] / ms[k + (prec,)] if k + (prec,) in ms else 0 for k in keys]
        bars = ax.bar([x + i * width for x in range(len(keys))], ys, width, label=prec)
        marks = [(x + i * width, ms[k + ("f16",)] / attention[k + (prec,)])
                 for x, k in enumerate(keys) if k + (prec,) in attention]
        if marks:
            ax.scatter(*zip(*marks), marker="_", s=120, color=bars.patches[0].get_facecolor(),
                       edgecolors="black", linewidths=1.5,
                       label=f"{prec}, attention alone", zorder=3)
    for goal in (1.0,) + tuple(goals):
        ax.axhline(goal, ls=":", lw=1, color="gray")
    label_groups(ax, width, len(precisions), [shape_label(f"d{d}", f"s{s}", c) for d, s, c in keys],
                 fontsize=8)
    ax.set_ylabel("speed vs our f16")
    ax.set_title(f"{name}: against our f16 kernel, same run (dotted: 1.0 and the goals; "
                 "bars: end to end, dashes: attention alone)")
    ax.legend(fontsize=8)
    save(fig, folder, name + ".png")


def tile_sweep(folder, name):
    """TFLOP/s of each tile of a `ftattn bench --tiles` sweep, one group of bars per shape."""
    data = rows(folder, name + ".csv")
    if not data:
        return
    key = lambda r: (r["dtype"], int(r["head_dim"]), r["causal"], int(r["seqlen"]))
    shapes = sorted({key(r) for r in data})
    fig, axes = plt.subplots(1, len(shapes), figsize=(3.2 * len(shapes), 3.8), squeeze=False)
    for ax, (dtype, d, causal, seqlen) in zip(axes[0], shapes):
        sel = [r for r in data if key(r) == (dtype, d, causal, seqlen)]
        # m..n.._w..s.., and the scheme where the sweep has several
        tiles = ["_".join(r["config"].split("_")[-4:-2]) for r in sel]
        if len({r.get("protection", "") for r in data}) > 1:
            tiles = [f"{t} {r['protection']}" for t, r in zip(tiles, sel)]
        ax.bar(range(len(sel)), [float(r["tflops"]) for r in sel])
        ax.set_xticks(range(len(sel)))
        ax.set_xticklabels(tiles, rotation=60, fontsize=7)
        mask = "causal" if causal == "1" else "none"
        title = f"{dtype} d{d} {mask}"
        if len({r["seqlen"] for r in data}) > 1:
            title += f" s{seqlen}"
        ax.set_title(title, fontsize=9)
    axes[0][0].set_ylabel("TFLOP/s")
    save(fig, folder, name + ".png")


def tiles_vs_f16(folder, name):
    """Each 8-bit tile's end-to-end speed over f16's default in the same run, one group of bars
    per (precision, head dim, mask, seqlen)."""
    data = rows(folder, name + ".csv")
    if not data:
        return
    key = lambda r: (int(r["head_dim"]), r["causal"], int(r["seqlen"]))
    f16 = {key(r): float(r["ms"]) for r in data if r["dtype"] == "f16"}
    other = [r for r in data if r["dtype"] != "f16"]
    tile = lambda r: "_".join(r["config"].split("_")[-4:-2])
    tiles = sorted({tile(r) for r in other})
    groups = sorted({(r["dtype"],) + key(r) for r in other})
    fig, ax = plt.subplots(figsize=(max(9, 0.6 * len(groups)), 4))
    width = 0.8 / len(tiles)
    for i, t in enumerate(tiles):
        ratio = {(r["dtype"],) + key(r): f16[key(r)] / float(r["ms"]) for r in other if tile(r) == t}
        ax.bar([g + i * width for g in range(len(groups))], [ratio.get(g, 0) for g in groups],
               width, label=t)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
    ax.set_xticklabels([f"{p} d{d} {'causal' if c == '1' else 'none'} {s // 1024}k"
                        for p, d, c, s in groups], rotation=60, fontsize=7)
    ax.set_ylabel("speed over f16 (same run)")
    ax.legend(fontsize=7)
    save(fig, folder, name + ".png")


def build_ab_tiles(folder, name):
    """Two builds on the same tiles (ws_tiles.csv: main against warp_specialized), TFLOP/s as the
    median of the rounds, one panel per shape."""
    data = rows(folder, name + ".csv")
    if not data:
        return
    key = lambda r: (int(r["head_dim"]), r["causal"], int(r["seqlen"]))
    shapes = sorted({key(r) for r in data})
    builds = sorted({r["build"] for r in data})
    fig, axes = plt.subplots(1, len(shapes), figsize=(2.6 * len(shapes), 3.8), squeeze=False,
                             sharey=True)
    for ax, shape in zip(axes[0], shapes):
        sel = [r for r in data if key(r) == shape]
        tiles = sorted({r["tile"] for r in sel})
        width = 0.8 / len(builds)
        for i, b in enumerate(builds):
            ys = [statistics.median(float(r["tflops"]) for r in sel
                                    if r["tile"] == t and r["build"] == b) for t in tiles]
            ax.bar([x + i * width for x in range(len(tiles))], ys, width, label=b)
        label_groups(ax, width, len(builds), tiles, rotation=60, fontsize=7)
        d, causal, seqlen = shape
        ax.set_title(f"d{d} s{seqlen} {'causal' if causal == '1' else 'none'}", fontsize=9)
    axes[0][0].set_ylabel("TFLOP/s")
    axes[0][0].legend(fontsize=7)
    save(fig, folder, name + ".png")


def campaign_bars(folder, data, labels, title, out, bar_inches=1.2):
    """Each summary row's outcomes as a stacked bar of shares of its trials."""
    # miscorrected: summaries written since 2026-11-29; older files count those trials as detected.
    outcomes = ["masked", "corrected", "detected", "false_positive", "sdc", "miscorrected"]
    shares = [[100 * int(r.get(o) or 0) / int(r["trials"]) for o in outcomes] for r in data]
    fig, ax = plt.subplots(figsize=(max(10, len(data) * bar_inches), 4.5))
    bottom = [0.0] * len(data)
    for j, o in enumerate(outcomes):
        ys = [s[j] for s in shares]
        ax.bar(range(len(data)), ys, bottom=bottom, label=o)
        bottom = [b + y for b, y in zip(bottom, ys)]
    ax.set_xticks(range(len(data)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("% of trials")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # clear of the bars
    save(fig, folder, out)


def llvm_campaign(folder):
    data = (rows(folder, "llvm_campaign.csv") or []) + (rows(folder, "llvm_campaign_mma.csv") or [])
    if not data:
        return
    labels = [f"{r['site'][3:]}\n{'DMR' if 'harden' in r['config'] else r['protection']}"
              for r in data]
    campaign_bars(folder, data, labels, "IR-level fault injection, 5,000 flips per bar",
                  "llvm_campaign.png")


def build_campaign(folder, name, sites, title, bar_inches=1.2):
    """A campaign summary with a `build` column (two builds, same run): the given sites' bars."""
    data = [r for r in rows(folder, name + ".csv") or [] if r["site"] in sites]
    if not data:
        return
    schemes = len({r["protection"] for r in data}) > 1  # name the scheme where several share
    labels = [f"{r['build']}\n{r['protection'] + ' ' if schemes else ''}{r['precision']} "
              f"{r['mask']}\n{r['site']}" for r in data]
    campaign_bars(folder, data, labels, title, name + ".png", bar_inches)


def sites_campaign(folder, name, title):
    """A campaign summary of one scheme and precision: every site's bar, by head dim and mask."""
    data = rows(folder, name + ".csv") or []
    if not data:
        return
    labels = [f"d{r['head_dim']} {r['mask']}\n{r['site']}" for r in data]
    campaign_bars(folder, data, labels, title, name + ".png")


def overhead_runs(folder, name, runs, scheme="flash_abft"):
    """One scheme's overhead over the unprotected kernel of the same run, per shape, one bar per
    run (each CSV a separate in-turn run, its rows of either tile: the scheme's tile's own)."""
    series = []
    for run in runs:
        data = rows(folder, run)
        if not data:
            return
        tile = lambda r: "_".join(r["config"].split("_")[5:7])
        ms = {(r["dtype"], r["seqlen"], r["causal"], tile(r), r["protection"]): float(r["ms"])
              for r in data}
        series.append((run, {k[:4]: 100 * (t / ms[k[:4] + ("none",)] - 1) for k, t in ms.items()
                             if k[4] == scheme and k[:4] + ("none",) in ms and
                             k[3].startswith("m192")}))
    shapes = sorted({k for _, s in series for k in s},
                    key=lambda k: (k[0], k[2], int(k[1])))
    fig, ax = plt.subplots(figsize=(max(9, len(shapes)), 4))
    width = 0.8 / len(series)
    for i, (run, s) in enumerate(series):
        ax.bar([x + i * width for x in range(len(shapes))], [s.get(k, 0) for k in shapes], width,
               label=run.replace(".csv", ""))
    ax.axhline(3, ls=":", lw=1, color="gray")
    label_groups(ax, width, len(series), [shape_label(p, s, c) for p, s, c, _ in shapes],
                 fontsize=8)
    ax.set_ylabel("time over unprotected (%)")
    ax.set_title(f"{scheme} over the unprotected kernel, three consumers, each run in turn "
                 "(dotted: the 3% goal)")
    ax.legend(fontsize=7)
    save(fig, folder, name + ".png")


def per_run(runs, folder, baseline, value):
    """{key: [value per run]} over the CSVs `runs`: `baseline(row)` names a row's baseline key
    (None: it is not one) and `value(row, baseline_ms)` gives (key, value) for the others, or
    None. A missing CSV: None."""
    out = {}
    for run in runs:
        data = rows(folder, run)
        if not data:
            return None
        base = {baseline(r): float(r["ms"]) for r in data if baseline(r) is not None}
        for r in data:
            kv = value(r, base)
            if kv is not None:
                out.setdefault(kv[0], []).append(kv[1])
    return out


def median_bars(ax, shapes, series, values):
    """Side-by-side bars per shape, one per (suffix, label) of `series`: the median of
    values[shape + suffix], whiskers at its min and max. Returns the bar width."""
    width = 0.8 / len(series)
    for i, (suffix, label) in enumerate(series):
        v = [values.get(k + suffix, [0]) for k in shapes]
        mid = [statistics.median(x) for x in v]
        ax.bar([x + i * width for x in range(len(shapes))], mid, width,
               yerr=[[m - min(x) for m, x in zip(mid, v)], [max(x) - m for m, x in zip(mid, v)]],
               capsize=2, label=label)
    return width


def reuse_overhead(folder, name, runs, schemes=("flash_abft",)):
    """Each scheme's time over the unprotected kernel of the same run, per shape, with K's and V's
    checksums encoded by a prologue on every call and prepared once (`bench --prepare-kv`): a bar
    at the median over the runs, whiskers at their min and max."""
    key = lambda r: (r["dtype"], r["seqlen"], r["causal"])
    overheads = per_run(
        runs, folder, lambda r: key(r) if r["protection"] == "none" else None,
        lambda r, none: ((key(r) + (r["protection"], prepared_flag(r))),
                         100 * (float(r["ms"]) / none[key(r)] - 1))
        if r["protection"] in schemes and key(r) in none else None)
    if overheads is None:
        return
    shapes = sorted({k[:3] for k in overheads}, key=lambda k: (k[0], k[2], int(k[1])))
    series = [((s, p), f"{s}, {'checksums prepared' if p == '1' else 'prologue per call'}")
              for s in schemes for p in ("0", "1")]
    fig, ax = plt.subplots(figsize=(max(9, 1.2 * len(shapes)), 4))
    width = median_bars(ax, shapes, series, overheads)
    for goal in sorted({3 if s == "flash_abft" else 8 if s == "efta_detect" else 12
                        for s in schemes}):
        ax.axhline(goal, ls=":", lw=1, color="gray")
    ax.axhline(0, lw=0.5, color="black")
    label_groups(ax, width, len(series), [shape_label(p, s, c) for p, s, c in shapes], fontsize=8)
    ax.set_ylabel("time over unprotected (%)")
    ax.set_title(f"Checksums per call or prepared, {len(runs)} run(s) in turn: median, min-max "
                 "(dotted: the goals)")
    ax.legend(fontsize=7)
    save(fig, folder, name + ".png")


def prepared_vs_f16(folder, name, runs, precision="f16_pasa"):
    """A precision's speed against f16 of the same run, per shape, with its work on K and V
    (f16_pasa: the shift) done per call and prepared once (`bench --prepare-kv`): a bar at the
    median over the runs, whiskers at their min and max."""
    key = lambda r: (r["head_dim"], r["seqlen"], r["causal"])
    speed = per_run(
        runs, folder, lambda r: key(r) if r["dtype"] == "f16" else None,
        lambda r, f16: (key(r) + (prepared_flag(r),), f16[key(r)] / float(r["ms"]))
        if r["dtype"] == precision and key(r) in f16 else None)
    if speed is None:
        return
    shapes = sorted({k[:3] for k in speed}, key=lambda k: (int(k[0]), k[2], int(k[1])))
    series = [(("0",), f"{precision}, shift per call"),
              (("1",), f"{precision}, K and V prepared once")]
    fig, ax = plt.subplots(figsize=(max(9, 1.1 * len(shapes)), 4))
    width = median_bars(ax, shapes, series, speed)
    ax.axhline(1.0, ls=":", lw=1, color="gray")
    ax.set_ylim(0.8, None)
    label_groups(ax, width, 2, [shape_label(f"d{d}", s, c) for d, s, c in shapes], fontsize=8)
    ax.set_ylabel("speed / f16")
    ax.set_title(f"{precision} against f16 of the same run, {len(runs)} run(s) in turn: median, "
                 "min-max (dotted: the 1.0x goal)")
    ax.legend(fontsize=7)
    save(fig, folder, name + ".png")


def build_overheads(folder, name, schemes):
    """An A/B CSV of bench/ab.py: each build's schemes over that build's unprotected kernel of the
    same round, per shape (the schemes' tiles may differ between builds): a bar at the median over
    the rounds, whiskers at their min and max."""
    data = rows(folder, name + ".csv")
    if not data:
        return
    key = lambda r: (r["build"], r["round"], r["head_dim"], r["seqlen"], r["causal"])
    none = {key(r): float(r["ms"]) for r in data if r["protection"] == "none"}
    overheads = {}
    for r in data:
        if r["protection"] in schemes and key(r) in none:
            k = (r["head_dim"], r["seqlen"], r["causal"], r["build"], r["protection"])
            overheads.setdefault(k, []).append(100 * (float(r["ms"]) / none[key(r)] - 1))
    shapes = sorted({k[:3] for k in overheads}, key=lambda k: (int(k[0]), k[2], int(k[1])))
    builds = list(dict.fromkeys(r["build"] for r in data))
    series = [((b, s), f"{b}: {s}") for b in builds for s in schemes
              if any(k[3:] == (b, s) for k in overheads)]
    fig, ax = plt.subplots(figsize=(max(9, 1.4 * len(shapes)), 4))
    width = median_bars(ax, shapes, series, overheads)
    label_groups(ax, width, len(series), [shape_label(f"d{d}", n, c) for d, n, c in shapes],
                 fontsize=8)
    ax.set_ylabel("time over the build's unprotected kernel (%)")
    ax.set_title(f"{name}: each build's schemes over its own unprotected kernel, in turn: median, "
                 "min-max", fontsize=9)
    ax.legend(fontsize=7)
    save(fig, folder, name + ".png")


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    protect_overhead(folder)
    protect_overhead(folder, "int8_abft", schemes=("flash_abft",))
    protect_overhead(folder, "fp8_abft", schemes=("flash_abft",))
    protect_overhead(folder, "fp8_efta_overhead")
    for name in ("int8_efta_overhead", "int8_efta_overhead_same_tile", "pasa_efta_overhead"):
        protect_overhead(folder, name)
    speed_vs_f16(folder, "pasa_speed")
    speed_vs_f16(folder, "pasa_wgmma_speed")
    speed_vs_f16(folder, "precision_speed", goals=(1.5, 1.6))
    speed_vs_f16(folder, "precision_speed_ws", goals=(1.5, 1.6))
    speed_vs_f16(folder, "pasa_ws_speed")
    speed_vs_f16(folder, "precision_speed_d256_ws", goals=(1.5, 1.6))
    tile_sweep(folder, "d256_ws")
    tile_sweep(folder, "d256_ws_short")
    tile_sweep(folder, "d96_tiles")
    tile_sweep(folder, "d96_pasa_tiles")
    tile_sweep(folder, "d96_protected_tiles")
    tile_sweep(folder, "d96_short_tiles")
    tile_sweep(folder, "d96_pasa_short_tiles")
    tile_sweep(folder, "q8_d192_tiles")
    tiles_vs_f16(folder, "fp8_three_consumers")
    tiles_vs_f16(folder, "fp8_ws_d256")
    tiles_vs_f16(folder, "q8_ws_overlap_tiles")
    tile_sweep(folder, "q8_ws_overlap_d256")
    speed_vs_f16(folder, "precision_speed_d256_fp8_ws", goals=(1.5,))
    protect_overhead(folder, "protect_overhead_d256")
    protect_overhead(folder, "protect_overhead_ws")
    protect_overhead(folder, "protect_overhead_abft_ws", schemes=("flash_abft",))
    protect_overhead(folder, "protect_overhead_ws_efta")
    protect_overhead(folder, "protect_overhead_interleaved")
    speed_vs_f16(folder, "precision_interleaved", goals=(1.5, 1.6))
    tile_sweep(folder, "ws_three_consumers")
    protect_overhead(folder, "protect_overhead_three_consumers")
    speed_vs_f16(folder, "precision_d128_three_consumers", goals=(1.5, 1.6))
    tile_sweep(folder, "abft_three_consumers")
    tile_sweep(folder, "abft_three_consumers_bf16")
    protect_overhead(folder, "protect_overhead_abft_three")
    overhead_runs(folder, "abft_three_runs",
                  ["abft_three_consumers.csv", "abft_three_consumers_bf16.csv",
                   "protect_overhead_abft_three.csv", "abft_three_rounds_f16_1.csv",
                   "abft_three_rounds_f16_2.csv", "abft_three_rounds_bf16.csv"])
    tiles_vs_f16(folder, "q8_ws_tiles")
    tile_sweep(folder, "abft_ws_tiles")
    build_ab_tiles(folder, "ws_tiles")
    tile_sweep(folder, "q8_tiles")
    tile_sweep(folder, "pasa_tiles")
    tile_sweep(folder, "pasa_wgmma_tiles")
    tile_sweep(folder, "pasa_efta_correct_tiles")
    tile_sweep(folder, "efta_correct_tiles")
    tile_sweep(folder, "fp8_wgmma_tiles")
    tile_sweep(folder, "wgmma16_tiles_d64")
    tile_sweep(folder, "wgmma16_tiles_d128")
    tile_sweep(folder, "abft_wgmma_tiles")
    tile_sweep(folder, "efta_wgmma_tiles")
    tile_sweep(folder, "efta_wgmma_tiles_d64")
    tile_sweep(folder, "efta_three_consumers_n64")
    tile_sweep(folder, "abft_d64_tiles")
    tile_sweep(folder, "d32_tiles")
    tile_sweep(folder, "d32_abft_tiles")
    tile_sweep(folder, "d32_efta_tiles")
    tile_sweep(folder, "d32_pasa_tiles")
    tile_sweep(folder, "efta_three_consumers_d32_d64")
    tile_sweep(folder, "d32_efta_fallback_tiles")
    reuse_overhead(folder, "abft_reuse_runs",
                   ["abft_reuse_f16_1.csv", "abft_reuse_f16_2.csv", "abft_reuse_f16_3.csv",
                    "abft_reuse_f16_reversed_1.csv", "abft_reuse_f16_reversed_2.csv",
                    "abft_reuse_bf16_1.csv", "abft_reuse_bf16_2.csv"])
    reuse_overhead(folder, "efta_reuse", ["efta_reuse_f16.csv"], ("efta_detect", "efta_correct"))
    prepared_vs_f16(folder, "pasa_prepared", ["pasa_prepared_1.csv", "pasa_prepared_2.csv"])
    # The goal tables against the unprotected kernel with 16-byte O stores (2026-11-27): the
    # landed build's rounds of two A/B runs.
    new_rounds = lambda csv_name: [f"{csv_name}#build=new,round={r}" for r in (1, 2)]
    reuse_overhead(folder, "goals_protect_stg128", new_rounds("protected_store_rows_ab.csv"),
                   ("flash_abft", "efta_detect", "efta_correct"))
    prepared_vs_f16(folder, "goals_pasa_stg128", new_rounds("q8_store_rows_pasa_shift_ab.csv"))
    prepared_vs_f16(folder, "goals_pasa_d64_d256_stg128",
                    ["pasa_d64_d256_stg128_1.csv", "pasa_d64_d256_stg128_2.csv"])
    # Flash-ABFT over twelve runs of the landed build (2026-11-27): its A/B rounds as `new`, then
    # as `main` beside the designs measured and not kept.
    main_rounds = lambda csv_name: [f"{csv_name}#build=main,round={r}" for r in (1, 2)]
    reuse_overhead(folder, "goals_flash_abft_stg128",
                   new_rounds("protected_store_rows_ab.csv") +
                   main_rounds("flash_abft_own_n8_wgmma_ab.csv") +
                   main_rounds("flash_abft_core_checksum_ab.csv") +
                   main_rounds("early_token_ab.csv") + main_rounds("gemm1_parts_ab.csv") +
                   main_rounds("flash_abft_staged_tile_ab.csv"), ("flash_abft",))
    llvm_campaign(folder)
    build_campaign(folder, "campaign_efta_correct_max_agreement", ("rescale", "row_max"),
                   "efta_correct, 10,000 flips per bar: main before and the build of 2026-11-29")
    build_campaign(folder, "campaign_efta_detect_max_agreement", ("rescale", "row_max"),
                   "efta_detect, 10,000 flips per bar: before the quad's max check and main")
    build_campaign(folder, "campaign_ones_copy", ("checksum", "row_sum"),
                   "10,000 flips per bar: main and every lane on one checked copy of l")
    sites_campaign(folder, "campaign_int8_abft_wgmma",
                   "int8 Flash-ABFT on the wgmma kernel, 10,000 flips per bar (1 x 2 x 512)")
    sites_campaign(folder, "campaign_fp8_abft_wgmma",
                   "fp8 Flash-ABFT on the wgmma kernel, 10,000 flips per bar (1 x 2 x 512)")
    sites_campaign(folder, "campaign_pasa_abft_ws",
                   "f16_pasa Flash-ABFT warp-specialised, 10,000 flips per bar (1 x 2 x 512)")
    tile_sweep(folder, "pasa_abft_tiles")
    build_campaign(folder, "campaign_pasa_efta_ws",
                   ("scores", "probs", "row_max", "row_sum", "rescale", "output", "checksum"),
                   "f16_pasa EFTA warp-specialised 128 x 128 w8s2, 10,000 flips per bar (1 x 2 x 512)")
    build_campaign(folder, "campaign_pasa_efta_tiles", ("scores", "output"),
                   "f16_pasa EFTA by tile (key-block size), 10,000 flips per bar (1 x 2 x 512)")
    tile_sweep(folder, "pasa_efta_tiles")
    tile_sweep(folder, "pasa_efta_tiles_d96")
    tile_sweep(folder, "int8_efta_wgmma_tiles")
    tile_sweep(folder, "q8_efta_mma_sync_main")
    sites_campaign(folder, "campaign_int8_efta_wgmma",
                   "int8 efta_detect on the wgmma kernel, 10,000 flips per bar (1 x 2 x 512)")
    for name in ("int8_efta_correct_wgmma_ab", "int8_efta_no_zero_ab"):
        build_overheads(folder, name, ("efta_detect", "efta_correct"))
    sites_campaign(folder, "campaign_int8_efta_correct_wgmma",
                   "int8 efta_correct on the wgmma kernel, 10,000 flips per bar (1 x 2 x 512)")
    build_campaign(folder, "campaign_scale_site", ("scale",),
                   "site scale (8-bit dequantisation factors): the second evaluation's own loads "
                   "against merged ones, 10,000 flips per bar (1 x 2 x 512)", bar_inches=1.8)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PNG plots beside the CSVs a GPU run leaves in bench/results/<gpu>/ (grids have their own, from
compare.py): protection overhead, f16_pasa against f16, IR-level campaign outcomes. A CSV that is
missing is skipped.

    python3 bench/plot_results.py bench/results/nvidia-h100
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def rows(folder, name):
    path = os.path.join(folder, name)
    return list(csv.DictReader(open(path))) if os.path.exists(path) else None


def save(fig, folder, name):
    fig.tight_layout()
    fig.savefig(os.path.join(folder, name), dpi=120)
    plt.close(fig)
    print("wrote", os.path.join(folder, name))


def protect_overhead(folder):
    data = rows(folder, "protect_overhead.csv")
    if not data:
        return
    ms = {(r["seqlen"], r["causal"], r["protection"]): float(r["ms"]) for r in data}
    shapes = sorted({(int(s), c) for s, c, _ in ms}, key=lambda x: (x[1], x[0]))
    schemes = ["flash_abft", "efta_detect", "efta_correct"]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(schemes)
    for i, scheme in enumerate(schemes):
        ys = [100 * (ms[(str(s), c, scheme)] / ms[(str(s), c, "none")] - 1)
              if (str(s), c, scheme) in ms else 0 for s, c in shapes]
        ax.bar([x + i * width for x in range(len(shapes))], ys, width, label=scheme)
    for goal in (3, 8, 12):
        ax.axhline(goal, ls=":", lw=1, color="gray")
    ax.set_xticks([x + width for x in range(len(shapes))])
    ax.set_xticklabels([f"{s}\n{'causal' if c == '1' else 'none'}" for s, c in shapes])
    ax.set_ylabel("time over unprotected (%)")
    ax.set_title("Protection overhead, head dim 128 (dotted: the goals 3/8/12%)")
    ax.legend()
    save(fig, folder, "protect_overhead.png")


def pasa_speed(folder):
    data = rows(folder, "pasa_speed.csv")
    if not data:
        return
    ms = {(r["head_dim"], r["seqlen"], r["causal"], r["dtype"]): float(r["ms"]) for r in data}
    keys = sorted({k[:3] for k in ms if k[3] == "f16_pasa" and k[:3] + ("f16",) in ms},
                  key=lambda k: (int(k[0]), int(k[1]), k[2]))
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.bar(range(len(keys)), [ms[k + ("f16",)] / ms[k + ("f16_pasa",)] for k in keys])
    ax.axhline(1.0, ls=":", color="gray")
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([f"d{d} s{s}\n{'causal' if c == '1' else 'none'}" for d, s, c in keys],
                       fontsize=8)
    ax.set_ylabel("speed vs our f16")
    ax.set_title("f16_pasa against f16, same run")
    save(fig, folder, "pasa_speed.png")


def llvm_campaign(folder):
    data = (rows(folder, "llvm_campaign.csv") or []) + (rows(folder, "llvm_campaign_mma.csv") or [])
    if not data:
        return
    outcomes = ["masked", "corrected", "detected", "false_positive", "sdc"]
    labels, shares = [], []
    for r in data:
        n = int(r["trials"])
        dmr = "harden" in r["config"]
        labels.append(f"{r['site'][3:]}\n{'DMR' if dmr else r['protection']}")
        shares.append([100 * int(r[o]) / n for o in outcomes])
    fig, ax = plt.subplots(figsize=(10, 4))
    bottom = [0.0] * len(data)
    for j, o in enumerate(outcomes):
        ys = [s[j] for s in shares]
        ax.bar(range(len(data)), ys, bottom=bottom, label=o)
        bottom = [b + y for b, y in zip(bottom, ys)]
    ax.set_xticks(range(len(data)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("% of trials")
    ax.set_title("IR-level fault injection, 5,000 flips per bar")
    ax.legend(fontsize=7, loc="lower right")
    save(fig, folder, "llvm_campaign.png")


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "bench/results"
    protect_overhead(folder)
    pasa_speed(folder)
    llvm_campaign(folder)


if __name__ == "__main__":
    main()

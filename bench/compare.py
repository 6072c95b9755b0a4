#!/usr/bin/env python3
"""ftattn against torch.nn.functional.scaled_dot_product_attention (flash and cuDNN backends),
on the same shapes, in the same run, on the same GPU.

Runs `ftattn bench` for our kernels, then times torch with CUDA events (warm-up, median of
--iters runs), and writes bench/results/<gpu>/<name>.csv plus a PNG plot. With --rounds R the
two sweeps alternate R times and each figure is the median over rounds, so slow drifts of the
GPU's clocks and temperature fall on both sides alike rather than on whichever ran second.

  python3 bench/compare.py --ftattn build/ftattn --name fwd_grid [--grid standard|issue2]
                           [--shapes "head_dim,heads,seqlen,batch;..."]
"""
import argparse
import csv
import os
import re
import statistics
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

# The standard grid: 16k tokens in total, head dim 64 x 16 heads, 128 x 32, 256 x 16.
STANDARD = [(d, h, s, 16384 // s) for d, h in ((64, 16), (128, 32), (256, 16))
            for s in (512, 1024, 2048, 4096, 8192, 16384)]
ISSUE2 = [(128, 32, 4096, 4)]


def flops(batch, heads, seqlen, head_dim, causal):
    pairs = seqlen * (seqlen + 1) // 2 if causal else seqlen * seqlen
    return 4.0 * batch * heads * pairs * head_dim


def l2_bytes():
    return getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20)


def time_torch(backend, q, k, v, causal, warmup, iters):
    with sdpa_kernel([backend]):
        try:
            for _ in range(warmup):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        except RuntimeError as e:  # backend not available for this shape/dtype
            print(f"  torch {backend.name}: unavailable ({str(e).splitlines()[0]})", flush=True)
            return float("nan")
        # The same protocol as `ftattn bench`: before each timed call, a fill of twice the L2
        # runs ahead on the stream. It empties the L2 for both sides alike, and while the GPU
        # runs it the CPU has queued the call, so Python's dispatch time is not in the figure.
        flush = torch.empty(2 * l2_bytes(), dtype=torch.uint8, device="cuda")
        times = []
        for i in range(iters):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            flush.fill_(i % 256)
            torch.cuda._sleep(200_000)  # ~0.1 ms more queue, in case dispatch outlasts the fill
            start.record()
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
    return statistics.median(times)


def run_ftattn(binary, shapes, dtypes, masks, warmup, iters, extra):
    """Returns {(d, s, b, h, causal, dtype): (ms, config)} from `ftattn bench --csv -`."""
    cmd = [binary, "bench", "--csv", "-", "--warmup", str(warmup), "--iters", str(iters),
           "--shapes", ";".join(f"{d},{h},{s},{b}" for d, h, s, b in shapes),
           "--precisions", ",".join(dtypes), "--masks", ",".join(masks)] + extra
    print("+", " ".join(cmd), flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    sys.stderr.write(out.stderr)
    rows = {}
    for r in csv.DictReader(out.stdout.splitlines()):
        key = (int(r["head_dim"]), int(r["seqlen"]), int(r["batch"]), int(r["heads"]),
               r["causal"] == "1", r["dtype"])
        rows[key] = (float(r["ms"]), r["config"])
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ftattn", default="build/ftattn")
    ap.add_argument("--name", default="fwd_grid")
    ap.add_argument("--grid", choices=["standard", "issue2"], default="standard")
    ap.add_argument("--shapes", default=None,
                    help="head_dim,heads,seqlen,batch;... instead of --grid")
    ap.add_argument("--dtypes", default="f16,bf16")
    ap.add_argument("--masks", default="none,causal")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=1, help="alternating sweeps; median over them")
    ap.add_argument("--out", default=None, help="results folder (default bench/results/<gpu>)")
    ap.add_argument("--ftattn-args", default="", help="extra arguments for ftattn bench")
    args = ap.parse_args()

    gpu = torch.cuda.get_device_name(0)
    gpu_tag = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")
    out_dir = args.out or os.path.join("bench", "results", gpu_tag)
    os.makedirs(out_dir, exist_ok=True)
    shapes = STANDARD if args.grid == "standard" else ISSUE2
    if args.shapes:
        shapes = [tuple(int(x) for x in part.split(",")) for part in args.shapes.split(";")]
    dtypes = args.dtypes.split(",")
    masks = args.masks.split(",")
    torch_dtype = {"f16": torch.float16, "bf16": torch.bfloat16}
    # Alternating sweeps: ours, then torch (cuDNN in the first round only: it is far ahead and
    # only there for scale).
    ours_runs, flash_runs, cudnn_runs = [], {}, {}
    for rnd in range(args.rounds):
        ours_runs.append(run_ftattn(args.ftattn, shapes, dtypes, masks, args.warmup, args.iters,
                                    args.ftattn_args.split()))
        for d, h, s, b in shapes:
            for dt in dtypes:
                gen = torch.Generator(device="cuda").manual_seed(0)
                q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch_dtype[dt],
                                       generator=gen) for _ in range(3))
                for mask in masks:
                    causal = mask == "causal"
                    key = (d, s, b, h, causal, dt)
                    flash_runs.setdefault(key, []).append(time_torch(
                        SDPBackend.FLASH_ATTENTION, q, k, v, causal, args.warmup, args.iters))
                    if rnd == 0:
                        cudnn_runs[key] = time_torch(SDPBackend.CUDNN_ATTENTION, q, k, v, causal,
                                                     args.warmup, args.iters)
                del q, k, v
                torch.cuda.empty_cache()

    rows = []
    for d, h, s, b in shapes:
        for dt in dtypes:
            for mask in masks:
                causal = mask == "causal"
                key = (d, s, b, h, causal, dt)
                f = flops(b, h, s, d, causal)
                flash = statistics.median(flash_runs[key])
                cudnn = cudnn_runs[key]
                ours_ms = [r[key][0] for r in ours_runs if key in r]
                ms = statistics.median(ours_ms) if ours_ms else float("nan")
                config = ours_runs[0].get(key, (0, ""))[1]
                tf = lambda t: f / (t * 1e-3) / 1e12
                row = dict(head_dim=d, seqlen=s, batch=b, heads=h, causal=int(causal), dtype=dt,
                           ftattn_ms=ms, flash_ms=flash, cudnn_ms=cudnn, ftattn_tflops=tf(ms),
                           flash_tflops=tf(flash), cudnn_tflops=tf(cudnn),
                           ratio_vs_flash=flash / ms, ratio_vs_cudnn=cudnn / ms, config=config,
                           gpu=gpu)
                rows.append(row)
                print(f"d{d} h{h} s{s} b{b} {dt} {'causal' if causal else 'full  '}: "
                      f"ftattn {row['ftattn_tflops']:6.1f}  flash {row['flash_tflops']:6.1f}  "
                      f"cudnn {row['cudnn_tflops']:6.1f} TFLOP/s  "
                      f"x{row['ratio_vs_flash']:.3f} vs flash  [{config}]", flush=True)

    path = os.path.join(out_dir, f"{args.name}.csv")
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    print("wrote", path)
    plot(rows, os.path.join(out_dir, f"{args.name}.png"), gpu)


def plot(rows, path, gpu):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    panels = sorted({(r["head_dim"], r["dtype"], r["causal"]) for r in rows})
    cols = 4
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False)
    for ax, (d, dt, c) in zip(axes.flat, panels):
        sel = sorted((r for r in rows if (r["head_dim"], r["dtype"], r["causal"]) == (d, dt, c)),
                     key=lambda r: r["seqlen"])
        xs = [str(r["seqlen"]) for r in sel]
        for key, label in (("ftattn_tflops", "ftattn"), ("flash_tflops", "torch flash (FA2)"),
                           ("cudnn_tflops", "torch cuDNN")):
            ax.plot(xs, [r[key] for r in sel], marker="o", label=label)
        ax.set_title(f"d{d} {dt} {'causal' if c else 'non-causal'}", fontsize=9)
        ax.set_xlabel("seqlen (batch = 16k / seqlen)", fontsize=8)
        ax.set_ylabel("TFLOP/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"Attention forward on {gpu}: median of timed runs, same process", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print("wrote", path)


if __name__ == "__main__":
    main()

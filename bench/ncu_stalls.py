#!/usr/bin/env python3
"""Where a kernel's warps wait, per SASS instruction, from ncu's source page.

Input: the CSV of `ncu -i REPORT --page source --csv --print-source sass`, for a report taken with
`--section SourceCounters` (warp stall sampling). Output, per kernel in the file: the share of all
stall samples at each opcode, with the wgmma instructions split by role (a wgmma wait, a wgmma
whose A operand comes from registers and so waits for them at issue, a wgmma on shared memory
alone), then the instructions with the most samples and each one's leading stall reasons.

    python3 bench/ncu_stalls.py ncu_sass.csv [--top 10]
"""
import argparse
import csv
import re
import sys

# ncu's per-reason columns on the source page ("stall_wait", "stall_barrier", ...); the
# "(Not Issued)" copies are left out.
REASON = re.compile(r"^stall_([a-z_]+)$")


def number(text):
    try:
        return int(text.replace(",", ""))
    except ValueError:
        return 0


def instruction(source):
    """(opcode without modifiers, operands) of a SASS line past its predicate."""
    words = source.split(None, 1)
    if words and words[0].startswith("@"):
        words = words[1].split(None, 1) if len(words) > 1 else []
    if not words:
        return "", []
    return words[0].split(".")[0], (words[1].split(",") if len(words) > 1 else [])


def role(source):
    """The class an instruction's samples are summed under."""
    op, operands = instruction(source)
    if op == "WARPGROUP" and "DEPBAR" in source:
        return "wgmma wait (WARPGROUP.DEPBAR)"
    if op.endswith("GMMA"):
        # A from registers (RS): the wgmma waits at issue for the registers it reads.
        if len(operands) > 1 and re.match(r"\s*R\d+", operands[1]):
            return f"{op} with A in registers (issue)"
        return f"{op} on shared memory (issue)"
    return op


def kernels(rows):
    """(name, header, data rows) for each kernel block of the CSV."""
    out = []
    for row in rows:
        if row and row[0] == "Kernel Name":
            out.append([row[1] if len(row) > 1 else "?", None, []])
        elif out and out[-1][1] is None:
            out[-1][1] = row
        elif out and row:
            out[-1][2].append(row)
    return out


def summarise(name, header, data, top):
    samples = header.index("Warp Stall Sampling (All Samples)")
    source = header.index("Source")
    reasons = [(i, m.group(1)) for i, h in enumerate(header) if (m := REASON.match(h))]
    total = sum(number(r[samples]) for r in data)
    lines = [f"== {name}: {total} warp stall samples"]
    if total == 0:
        return lines
    by_role = {}
    for r in data:
        key = role(r[source].strip())
        by_role[key] = by_role.get(key, 0) + number(r[samples])
    for key, n in sorted(by_role.items(), key=lambda kv: -kv[1]):
        if n * 200 >= total:  # 0.5% and up
            lines.append(f"  {100 * n / total:5.1f}%  {key}")
    lines.append(f"  the {top} instructions with the most samples, in program order:")
    ranked = sorted(range(len(data)), key=lambda i: -number(data[i][samples]))[:top]
    for i in sorted(ranked):
        r = data[i]
        n_all = max(1, number(r[samples]))
        lead = sorted(((number(r[c]), why) for c, why in reasons), reverse=True)[:3]
        why = ", ".join(f"{w} {100 * n / n_all:.0f}%" for n, w in lead if n)
        # Samples under reasons the page has no column for (on Hopper, "warpgroup arrive").
        other = n_all - sum(number(r[c]) for c, _ in reasons)
        if other * 2 > n_all:
            why = f"no column on the page {100 * other / n_all:.0f}%" + (", " + why if why else "")
        share = 100 * number(r[samples]) / total
        lines.append(f"  {share:5.1f}%  {r[source].strip()[:60]:60s}  {why}")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=10, help="instructions to list (default 10)")
    args = ap.parse_args(argv)
    with open(args.csv, newline="") as f:
        blocks = kernels(list(csv.reader(f)))
    if not blocks:
        sys.exit(f"{args.csv}: no 'Kernel Name' row; is it ncu's source page as CSV?")
    for name, header, data in blocks:
        if header is None or "Warp Stall Sampling (All Samples)" not in header:
            sys.exit(f"{args.csv}: {name} has no warp stall samples (take the report with "
                     "--section SourceCounters)")
        print("\n".join(summarise(name, header, data, args.top)))


if __name__ == "__main__":
    main()

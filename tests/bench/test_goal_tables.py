#!/usr/bin/env python3
"""bench/goal_tables.py on made-up bench CSVs (no GPU): overheads and speeds taken within each
run against its own peer, min to max over runs (with --median, the median first), prepared and
attention-only rows apart, failed kernels left out, and the errors for a missing CSV or nothing
to compare."""
import csv
import io
import os
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import goal_tables  # noqa: E402

FIELDS = ["build", "round", "head_dim", "seqlen", "batch", "heads", "causal", "dtype", "config",
          "ms", "passed", "protection", "attention_ms", "prepared_kv"]


def row(build, rnd, dtype, protection, ms, seqlen=2048, causal="0", prepared="0", attention=0.0,
        passed="1"):
    return dict(build=build, round=rnd, head_dim=128, seqlen=seqlen, batch=8, heads=32,
                causal=causal, dtype=dtype, config=f"k_{dtype}_{protection}", ms=ms,
                passed=passed, protection=protection, attention_ms=attention,
                prepared_kv=prepared)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = goal_tables.main(argv)
    return rc, out.getvalue(), err.getvalue()


def line_of(text, *words):
    """The table line whose leading cells are `words`."""
    prefix = "| " + " | ".join(words) + " |"
    found = [line for line in text.splitlines() if line.startswith(prefix)]
    check(len(found) == 1, f"{prefix}: {found}\n{text}")
    return [c.strip() for c in found[0].strip("|").split("|")]


def main():
    with tempfile.TemporaryDirectory() as d:
        rows = []
        # Two rounds of build 'new'; the f16 baseline drifts 10% between them, the ratios do not
        # (the first round's protected kernel is 2.2 / 2.0, the second's 2.31 / 2.1: both +10%).
        for rnd, scale in (("1", 1.0), ("2", 1.05)):
            rows += [row("new", rnd, "f16", "none", 2.0 * scale),
                     row("new", rnd, "f16", "flash_abft", 2.2 * scale),
                     row("new", rnd, "f16", "flash_abft", (2.04 if rnd == "1" else 2.1) * scale,
                         prepared="1"),
                     row("new", rnd, "f16", "none", 1.0 * scale, causal="1"),
                     row("new", rnd, "f16", "none", 4.0 * scale, seqlen=4096),
                     row("new", rnd, "int8", "none", 2.5 * scale, attention=1.6 * scale),
                     # A kernel that failed its check counts in no ratio.
                     row("new", rnd, "fp8_e4m3", "none", 1.0 * scale, passed="0")]
        # Another build's rows in the same file: only the selected build is read.
        rows.append(row("old", "1", "f16", "flash_abft", 100.0))
        path = os.path.join(d, "ab.csv")
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows)

        rc, text, err = run([d, "ab.csv#build=new,round=1", "ab.csv#build=new,round=2"])
        check(rc == 0, f"exit code {rc}: {err}")
        check(text.startswith("2 run(s)"), text)
        # Per call +10% in both runs; prepared +2% and +5%: min to max. (Columns: the key
        # lengths a ratio was formed at; 4k has no protected kernel here.)
        cells = line_of(text, "f16", "128", "flash_abft", "none", "per call")
        check(cells[5:] == ["2", "+10.0%"], cells)
        cells = line_of(text, "f16", "128", "flash_abft", "none", "prepared")
        check(cells[5:] == ["2", "+2.0% to +5.0%"], cells)
        # int8 end to end 2.0 / 2.5 = 0.8x; its attention kernel alone 2.0 / 1.6 = 1.25x.
        cells = line_of(text, "int8", "128", "none", "per call", "end to end")
        check(cells[5:] == ["2", "0.80x"], cells)
        cells = line_of(text, "int8", "128", "none", "per call", "attention alone")
        check(cells[5:] == ["2", "1.25x"], cells)
        check("fp8_e4m3" not in text, text)
        check("+4900" not in text and "old" not in text, text)

        # --median: the median over runs, then the range. Three runs (a third round of +20%
        # per call): the median is the middle one.
        rows3 = rows + [row("new", "3", "f16", "none", 2.0),
                        row("new", "3", "f16", "flash_abft", 2.4)]
        with open(os.path.join(d, "three.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows3)
        rc, text, err = run([d, "--median"] + [f"three.csv#build=new,round={r}" for r in "123"])
        check(rc == 0, err)
        check(text.startswith("3 run(s); median (min to max)"), text)
        cells = line_of(text, "f16", "128", "flash_abft", "none", "per call")
        check(cells[5:] == ["3", "+10.0% (+10.0% to +20.0%)"], cells)
        cells = line_of(text, "f16", "128", "flash_abft", "none", "prepared")  # two runs of three
        check(cells[5:] == ["2", "+3.5% (+2.0% to +5.0%)"], cells)

        # One run missing a shape: its cell says from how many runs it comes.
        rows2 = [r for r in rows if r["build"] == "new" and r["round"] == "1"]
        rows2 += [row("x", "1", "f16", "none", 4.0, seqlen=4096),
                  row("x", "1", "f16", "flash_abft", 4.4, seqlen=4096),
                  row("x", "1", "f16", "none", 2.0), row("x", "1", "f16", "flash_abft", 2.3)]
        with open(os.path.join(d, "two.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=FIELDS)
            w.writeheader()
            w.writerows(rows2)
        rc, text, err = run([d, "two.csv#build=new", "two.csv#build=x"])
        check(rc == 0, err)
        cells = line_of(text, "f16", "128", "flash_abft", "none", "per call")
        check(cells[5:] == ["2", "+10.0% to +15.0%", "+10.0% (1 runs)"], cells)

        # Errors: a missing CSV, a selection with no rows, runs with nothing to compare.
        rc, _, err = run([d, "missing.csv"])
        check(rc == 2 and "no missing.csv" in err, err)
        rc, _, err = run([d, "ab.csv#build=none"])
        check(rc == 2 and "selects no rows" in err, err)
        rc, _, err = run([d, "ab.csv#build=old"])
        check(rc == 2 and "no protected or non-f16 kernel" in err, err)
    print("goal_tables.py: all checks passed")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench/ab.py against fake ftattn builds (no GPU): alternating rounds, one cache per build, the
combined CSV, speed ratios against the first build, and a failed reference check in the exit
code."""
import csv
import importlib.util
import io
import os
import stat
import sys
import tempfile
from contextlib import redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import ab  # noqa: E402

FAKE = """#!/usr/bin/env bash
# A fake `ftattn bench --csv -`: logs its call, prints two kernels at {ms} ms, and k_abft also
# with K and V prepared once (bench --prepare-kv) at {ms_prepared} ms.
echo "{name} $FTATTN_CACHE_DIR $*" >> "{log}"
echo "head_dim,seqlen,batch,heads,causal,dtype,config,ms,min_ms,tflops,rel_l2_error,passed,protection,overhead_vs_none,prepared_kv"
echo "128,512,32,32,0,f16,k_none,{ms},{ms},300,1e-4,{passed},none,0,0"
echo "128,512,32,32,1,f16,k_causal,{ms2},{ms2},200,1e-4,1,none,0,0"
echo "128,512,32,32,0,f16,k_abft,{ms},{ms},300,1e-4,{passed},flash_abft,{overhead},0"
echo "128,512,32,32,0,f16,k_abft,{ms_prepared},{ms_prepared},300,1e-4,{passed},flash_abft,0.01,1"
echo "128,512,32,32,1,f16,k_abft_causal,{ms2},{ms2},200,1e-4,1,flash_abft,0.5,0"
"""


def fake(folder, name, ms, ms2, passed, log, overhead=0.05, ms_prepared=None):
    path = os.path.join(folder, name)
    with open(path, "w") as f:
        f.write(FAKE.format(name=name, ms=ms, ms2=ms2, passed=passed, log=log, overhead=overhead,
                            ms_prepared=ms if ms_prepared is None else ms_prepared))
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)
    return path


def label(line):
    """A table line's kernel label: the words before the shape (s512 ...)."""
    return line[:line.index(" s512")].strip()


def speed_lines(lines):
    """The speed table's lines by kernel label (those before the overhead table)."""
    end = next((i for i, line in enumerate(lines) if line.startswith("overhead against")),
               len(lines))
    return {label(line): line for line in lines[:end] if line.startswith("k_")}


def overhead_lines(lines):
    """The overhead table's lines by kernel label (those after its heading)."""
    start = next(i for i, line in enumerate(lines) if line.startswith("overhead against"))
    return {label(line): line for line in lines[start + 1:] if line.startswith("k_")}


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "calls.log")
        a = fake(d, "a", 2.0, 1.0, 1, log)
        b = fake(d, "b", 1.0, 2.0, 1, log, overhead=0.02, ms_prepared=4.0)
        out = os.path.join(d, "ab.csv")
        text = io.StringIO()
        with redirect_stdout(text):
            rc = ab.main(["--bin", f"base={a}", "--bin", f"new={b}", "--rounds", "3", "--out",
                          out, "--", "--shapes", "128,32,512,32"])
        check(rc == 0, f"exit code {rc}")
        calls = [line.split() for line in open(log)]
        # Three rounds of two builds, alternating who goes first; the bench args pass through.
        check([c[0] for c in calls] == ["a", "b", "b", "a", "a", "b"], calls)
        check(all(c[2:] == ["bench", "--csv", "-", "--shapes", "128,32,512,32"] for c in calls),
              calls)
        caches = {c[0]: c[1] for c in calls}
        check(caches["a"] != caches["b"], "the builds share a kernel cache")
        rows = list(csv.DictReader(open(out)))
        check(len(rows) == 30, len(rows))
        check({r["build"] for r in rows} == {"base", "new"}, rows[0])
        check({r["round"] for r in rows} == {"1", "2", "3"}, rows[0])
        # new is twice as fast on k_none and half as fast on k_causal.
        lines = text.getvalue().splitlines()
        speed = speed_lines(lines)
        check(speed["k_none"].split()[-1] == "2.000x", speed)
        check(speed["k_causal"].split()[-1] == "0.500x", speed)
        # A kernel with K and V prepared once is a row of its own: base's prepared k_abft runs
        # at 2 ms, new's at 4 ms (0.5x), while per call new's runs twice as fast.
        check(speed["k_abft flash_abft"].split()[-1] == "2.000x", speed)
        check(speed["k_abft flash_abft prepared"].split()[-1] == "0.500x", speed)
        # Each build's protected kernel against its own unprotected one, as the bench gave it,
        # in a second table after the speed ratios.
        over = overhead_lines(lines)
        check(over["k_abft flash_abft"].split()[-2:] == ["+5.0%", "+2.0%"], over)
        check(over["k_abft flash_abft prepared"].split()[-2:] == ["+1.0%", "+1.0%"], over)
        check(over["k_abft_causal flash_abft"].split()[-2:] == ["+50.0%", "+50.0%"], over)
        # --from-csv prints the same tables from the CSV alone, timing nothing.
        open(log, "w").close()
        again = io.StringIO()
        with redirect_stdout(again):
            rc = ab.main(["--from-csv", out])
        check(rc == 0, f"--from-csv exit code {rc}")
        check(open(log).read() == "", "--from-csv ran a build")
        table = [line for line in again.getvalue().splitlines() if line.startswith("k_")]
        check(table == [line for line in lines if line.startswith("k_")], again.getvalue())
        if importlib.util.find_spec("matplotlib") is not None:
            check(os.path.exists(os.path.splitext(out)[0] + ".png"), "no PNG beside the CSV")

        # A failed reference check in any build makes the exit code 1.
        open(log, "w").close()
        bad = fake(d, "bad", 1.0, 1.0, 0, log)
        with redirect_stdout(io.StringIO()):
            rc = ab.main(["--bin", f"base={a}", "--bin", f"bad={bad}", "--rounds", "1", "--out",
                          out])
        check(rc == 1, f"a failed check gave exit code {rc}")
        # As ftattn bench reports it: a failed check times nothing (ms 0). That kernel's cell is
        # '-', not a division by zero, and the other kernel keeps its ratio.
        open(log, "w").close()
        zero = fake(d, "zero", 0.0, 2.0, 0, log)
        text = io.StringIO()
        with redirect_stdout(text):
            rc = ab.main(["--bin", f"base={a}", "--bin", f"zero={zero}", "--rounds", "1", "--out",
                          out])
        check(rc == 1, f"a failed check gave exit code {rc}")
        lines = text.getvalue().splitlines()
        speed = speed_lines(lines)
        check(speed["k_none"].split()[-1] == "-", speed)
        check(speed["k_causal"].split()[-1] == "0.500x", speed)
        # zero's unprotected k_none failed, so its k_abft has no overhead ('-'); its causal
        # pair still has one.
        over = overhead_lines(lines)
        check(over["k_abft flash_abft"].split()[-1] == "-", over)
        check(over["k_abft_causal flash_abft"].split()[-1] == "+50.0%", over)

        # Bad arguments are refused with a reason.
        for argv, reason in ((["--bin", f"base={a}", "--out", out], "at least two"),
                             (["--bin", f"x={a}", "--bin", f"x={b}", "--out", out], "twice"),
                             (["--bin", a, "--bin", f"y={b}", "--out", out], "NAME=PATH"),
                             (["--bin", f"x={a}", "--bin", f"y={b}"], "--out"),
                             (["--from-csv", out, "--out", out], "--from-csv takes no")):
            try:
                ab.main(argv)
                raise AssertionError(f"{argv} was accepted")
            except SystemExit as e:
                check(reason in str(e), f"{argv}: {e}")
    print("ab.py: all checks passed")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench/ncu_stalls.py on a made-up ncu source page (no GPU, no ncu)."""
import contextlib
import io
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import ncu_stalls as ns  # noqa: E402


def check(cond, what):
    if not cond:
        raise AssertionError(what)


HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)",
          "Warp Stall Sampling (Not-issued Samples)", "# Samples", "stall_barrier", "stall_wait",
          "stall_wait (Not Issued)"]


def page(rows, name="k"):
    lines = [f'"Kernel Name","{name}",', ",".join(f'"{h}"' for h in HEADER)]
    for addr, src, n, barrier, wait in rows:
        cells = [addr, src, n, "0", n, barrier, wait, "0"]
        lines.append(",".join(f'"{c}"' for c in cells))
    return "\n".join(lines) + "\n"


def run(text, *args):
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(text)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            ns.main([f.name, *args])
    finally:
        os.unlink(f.name)
    return out.getvalue()


def main():
    # Roles: a wgmma with A in registers, one on shared memory, a wait, predicated branches.
    check(ns.role("IGMMA.64x128x32.U8.S8 R88, R24, gdesc[UR8], R88") ==
          "IGMMA with A in registers (issue)", "RS wgmma")
    check(ns.role("QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR8], RZ, !UPT") ==
          "QGMMA on shared memory (issue)", "SS wgmma")
    check(ns.role("WARPGROUP.DEPBAR.LE gsb0, 0x0") == "wgmma wait (WARPGROUP.DEPBAR)", "wait")
    check(ns.role("@!P0  BRA 0x7f00") == "BRA", "predicate skipped")
    check(ns.role("WARPGROUP.ARRIVE") == "WARPGROUP", "arrive is no wait")

    # 1,000 samples: 400 at the RS wgmma (none under a named reason), 300 + 200 at two waits,
    # 100 at a branch (60 barrier, 40 wait). Numbers carry thousands separators as ncu's do.
    text = page([("0x10", "@!P0 BRA 0x40", "100", "60", "40"),
                 ("0x20", "IGMMA.64x128x32.U8.S8 R88, R24, gdesc[UR8], R88", "400", "0", "0"),
                 ("0x30", "WARPGROUP.DEPBAR.LE gsb0, 0x1", "300", "290", "10"),
                 ("0x40", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "200", "200", "0")], "attention")
    out = run(text, "--top", "2")
    check("== attention: 1000 warp stall samples" in out, out)
    check(" 50.0%  wgmma wait (WARPGROUP.DEPBAR)" in out, "the two waits summed: " + out)
    check(" 40.0%  IGMMA with A in registers (issue)" in out, out)
    check(" 10.0%  BRA" in out, out)
    # The top two, in program order: the wgmma first (address 0x20), then the first wait.
    listed = [line for line in out.splitlines() if line.startswith("   ") and "GMMA." in line
              or "DEPBAR.LE" in line]
    check(len(listed) == 2 and "IGMMA" in listed[0] and "0x1" in listed[1], out)
    check("no column on the page 100%" in listed[0], "unnamed samples said: " + out)
    check("barrier 97%" in listed[1] and "wait 3%" in listed[1], out)
    check("BRA 0x40" not in out.split("in program order:")[1], "only the top two listed")

    # Thousands separators.
    big = page([("0x10", "MUFU.EX2 R1, R2", "1,500", "0", "1,500")])
    check("1500 warp stall samples" in run(big), "1,500 read as 1500")

    # A page without stall samples, or no page at all, is refused with what to do.
    for bad, why in (('"Kernel Name","k",\n"Address","Source"\n"0x0","NOP"\n', "SourceCounters"),
                     ("x\n", "source page")):
        try:
            run(bad)
        except SystemExit as e:
            check(why in str(e), f"the message names {why}: {e}")
        else:
            raise AssertionError("a page without samples was accepted")
    print("ncu_stalls.py: ok")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""bench/sass_loops.py on a made-up cuobjdump listing (no GPU, no cuobjdump)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import sass_loops as sl  # noqa: E402


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def listing(name, body):
    lines = [f"\t\tFunction : {name}"]
    for i, text in enumerate(body):
        lines.append(f"        /*{i * 16:04x}*/                   {text} ;"
                     "                 /* 0x000000000000000000 */")
        lines.append("                                                   /* 0x000000000000 */")
    return "\n".join(lines) + "\n"


def main():
    # A kernel: two setup instructions, a 6-instruction loop (addresses 0x20-0x70) that branches
    # back to 0x20, a retry loop that must not count, and a forward branch.
    body = ["MOV R1, c[0x0][0x28]", "S2R R0, SR_TID.X",
            "FFMA R2, R3, R4, R5", "@!P0 FFMA.FTZ R6, R2, R2, R6", "MUFU.EX2 R7, R6",
            "FMNMX R8, R7, R8, !PT", "ISETP.GE.AND P0, PT, R0, 0x4, PT", "@!P0 BRA 0x20",
            "@P1 BRA.U.ANY 0x70", "BRA 0xa0", "EXIT"]
    text = listing("ftattn_fwd_sm90a_f16_d128", body) + listing("quantize_rows_x", ["EXIT"])
    functions = sl.parse(text)
    check(set(functions) == {"ftattn_fwd_sm90a_f16_d128", "quantize_rows_x"}, functions.keys())
    kernel = functions["ftattn_fwd_sm90a_f16_d128"]
    check(len(kernel) == len(body), len(kernel))
    check(sl.opcode("@!P0 FFMA.FTZ R6, R2, R2, R6") == "FFMA", "predicate and modifiers")
    check(sl.opcode("@!UP1 UIADD3 UR4, UR4, 0x1, URZ") == "UIADD3", "uniform predicate")
    # The loop from 0x20 to its branch at 0x70: six instructions; no other backward branch.
    found = sl.loops(kernel, min_size=3)
    check(found == [(0x20, 0x70, 6)], found)
    check(sl.loops(kernel, min_size=6) == [], "min is exclusive")
    counts = sl.mix(kernel, 0x20, 0x70)
    check(counts["FFMA"] == 2 and counts["MUFU"] == 1 and counts["BRA"] == 1, counts)
    check(sum(counts.values()) == 6, counts)
    print("sass_loops.py: all checks passed")


if __name__ == "__main__":
    main()

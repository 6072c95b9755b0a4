#!/usr/bin/env python3
"""How many SASS instructions each key-block loop of a generated kernel issues (no GPU).

The 8-bit and the three-consumer 16-bit Hopper kernels run short of issue slots, so the length
of the loop body that runs once per key block says more about a change than the kernel's total.
This runs `ftattn inspect --sass` (cuobjdump must be on PATH) and prints, per attention kernel,
its instruction count and each loop: a backward branch over more than `--min` instructions,
with its opcode mix. Loops are listed in the order their branches appear; a loop whose body has
two copies of a step under a branch counts both.

  python3 bench/sass_loops.py [--ftattn build/ftattn] [--min 150] [--mix] -- <inspect args>
  e.g. python3 bench/sass_loops.py --mix -- --arch sm_90a --precision f16 --head-dim 128
"""
import argparse
import collections
import re
import signal
import subprocess
import sys

_FUNCTION = re.compile(r"Function : (\S+)")
_INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
_BRANCH = re.compile(r"\bBRA (?:`\()?(?:0x)?([0-9a-f]+)")
_PREDICATE = re.compile(r"^@!?U?P\w+\s+")


def parse(text):
    """{function: [(address, instruction text)]} of cuobjdump's SASS listing."""
    functions, current = {}, None
    for line in text.splitlines():
        m = _FUNCTION.search(line)
        if m:
            current = functions.setdefault(m.group(1), [])
            continue
        m = _INSTRUCTION.match(line)
        if m and current is not None:
            current.append((int(m.group(1), 16), m.group(2)))
    return functions


def opcode(instruction):
    """The opcode without its predicate and modifiers: '@!P0 FFMA.FTZ R1, ...' -> 'FFMA'."""
    return _PREDICATE.sub("", instruction).split()[0].split(".")[0]


def loops(instructions, min_size=150):
    """[(first address, branch address, instructions in the body)] of the backward branches
    over more than min_size instructions (BRA.U.ANY retry loops excluded)."""
    found = []
    for address, text in instructions:
        if opcode(text) != "BRA" or ".U.ANY" in text:
            continue
        m = _BRANCH.search(text)
        if not m:
            continue
        target = int(m.group(1), 16)
        body = sum(1 for a, _ in instructions if target <= a <= address)
        if target < address and body > min_size:
            found.append((target, address, body))
    return found


def mix(instructions, first, last):
    """Opcode counts of the instructions from first to last (addresses), most frequent first."""
    return collections.Counter(opcode(t) for a, t in instructions if first <= a <= last)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ftattn", default="build/ftattn")
    parser.add_argument("--min", type=int, default=150, help="smallest loop body to list")
    parser.add_argument("--mix", action="store_true", help="print each loop's opcode mix")
    parser.add_argument("inspect_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    inspect = [a for a in args.inspect_args if a != "--"]
    run = subprocess.run([args.ftattn, "inspect", "--sass", *inspect], capture_output=True,
                         text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stderr)
        return run.returncode
    for name, instructions in parse(run.stdout).items():
        if not name.startswith("ftattn_fwd"):
            continue
        found = loops(instructions, args.min)
        print(f"{name}: {len(instructions)} instructions, loops "
              + ", ".join(str(body) for _, _, body in found))
        if args.mix:
            for first, last, body in found:
                counts = mix(instructions, first, last)
                print(f"  {body}: " + " ".join(f"{k} {v}" for k, v in counts.most_common()))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into head
    sys.exit(main(sys.argv[1:]))

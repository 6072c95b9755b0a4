"""Reading the CSVs under bench/results/: a name may select one build and round of an ab.py CSV
(`file.csv#build=new,round=1`), which then reads as a run of its own."""
import csv
import os


def rows(folder, name):
    """The CSV's rows, those of the selected build and round if the name has a `#...`; None if
    the file is missing."""
    name, _, select = name.partition("#")
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        return None
    want = dict(kv.split("=", 1) for kv in select.split(",")) if select else {}
    return [r for r in csv.DictReader(open(path)) if all(r.get(k) == v for k, v in want.items())]


def prepared_flag(r):
    """'1' for a kernel timed with K and V prepared once (bench --prepare-kv; reused_checksums
    before its rename), else '0'."""
    return r.get("prepared_kv") or r.get("reused_checksums") or "0"

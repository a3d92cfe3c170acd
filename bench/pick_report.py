#!/usr/bin/env python3
"""Summaries of gemm_ab.py's output (its table, saved to files or piped in), for judging the
kernel pick (kernels/pick_hd.h):

    python3 bench/pick_report.py [--off 3] FILE...

One build timed with the pick (variant 0, "auto") and forced variants: the points where a
forced variant is more than --off per cent faster than the pick, and over all points the
geometric mean of (fastest forced variant) / (pick).

Two or more builds timed with the pick alone (old=… new=… --variants 0): per point the first
build's time over each other build's (above 1: that build is faster), their geometric mean,
and how many points moved by more than --off per cent either way.

Back-to-back times are used (the first figure of each cell, lowest of the rounds).
"""
import argparse
import math
import re
import sys

ROW = re.compile(r"^(\d+)x(\d+) M=(\d+) (\S+) \| (.*)$")
CELL = re.compile(r"^\s*([\d.]+) \[")


def parse(lines):
    """{(N, K, M): {variant: [back-to-back µs per build, None where the build lacks it]}}"""
    rows = {}
    for line in lines:
        m = ROW.match(line.rstrip("\n"))
        if not m:
            continue
        cells = []
        for cell in m.group(5).split(" | "):
            c = CELL.match(cell)
            cells.append(float(c.group(1)) if c else None)
        key = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        rows.setdefault(key, {})[m.group(4)] = cells
    return rows


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def report_pick(rows, off):
    """One build: the pick against the forced variants."""
    ratios = []
    print(f"points where a forced variant is more than {off:g} % faster than the pick:")
    for (n, k, m), vs in sorted(rows.items()):
        pick = vs.get("auto", [None])[0]
        forced = [(t[0], v) for v, t in vs.items() if v != "auto" and t[0] is not None]
        if pick is None or not forced:
            continue
        best, name = min(forced)
        ratios.append(best / pick)
        if best < pick * (1 - off / 100):
            print(f"  {n}x{k} M={m}: pick {pick:.2f} µs, {name} {best:.2f} ({pick / best:.2f}x)")
    print(f"{sum(r < 1 - off / 100 for r in ratios)} of {len(ratios)} points; "
          f"fastest forced / pick, geometric mean {geomean(ratios):.3f}")


def report_builds(rows, off):
    """Two or more builds, the pick each: the first against the others."""
    nb = max(len(vs["auto"]) for vs in rows.values() if "auto" in vs)
    for b in range(1, nb):
        ratios = []
        print(f"build 1 / build {b + 1}, per point (above 1: build {b + 1} faster):")
        for (n, k, m), vs in sorted(rows.items()):
            t = vs.get("auto")
            if not t or t[0] is None or t[b] is None:
                continue
            ratios.append(t[0] / t[b])
            print(f"  {n}x{k} M={m}: {t[0]:.2f} -> {t[b]:.2f} µs ({t[0] / t[b]:.3f})")
        faster = sum(r > 1 + off / 100 for r in ratios)
        slower = sum(r < 1 - off / 100 for r in ratios)
        print(f"{len(ratios)} points: geometric mean {geomean(ratios):.3f}, more than {off:g} % faster at "
              f"{faster}, slower at {slower}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*", help="gemm_ab.py output (standard input where none)")
    ap.add_argument("--off", type=float, default=3.0, help="per cent counted as a difference")
    args = ap.parse_args()
    lines = []
    for f in args.files or ["-"]:
        with (sys.stdin if f == "-" else open(f, encoding="utf-8")) as fh:
            lines += fh.readlines()
    rows = parse(lines)
    if not rows:
        print("no gemm_ab.py rows found", file=sys.stderr)
        return 1
    if any(len(vs) > 1 for vs in rows.values()):
        report_pick(rows, args.off)
    else:
        report_builds(rows, args.off)
    return 0


if __name__ == "__main__":
    sys.exit(main())

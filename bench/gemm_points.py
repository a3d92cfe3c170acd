#!/usr/bin/env python3
"""Runs the library's own pick at the given points, a few calls each, and nothing else: a target
for a profiler, so that its report holds only these launches.

    ncu --clock-control none -k regex:fk_gemm_skinny --set full \
        python3 bench/gemm_points.py LIB tensor|channel|block:G NxKxM [NxKxM ...] [--calls 2]

Loading the library makes one small product first (gemm_bench.load asks whether it knows
FK_SCALE_BLOCK_RS); with -k regex:fk_gemm_skinny it is the report's first kernel.
"""
import argparse
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import gemm_bench as gb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib", help="libfeather_kernels.so")
    ap.add_argument("mode", help="tensor, channel or block:G")
    ap.add_argument("points", nargs="+", help="N x K x M")
    ap.add_argument("--calls", type=int, default=2)
    args = ap.parse_args()
    lib = gb.load(args.lib)
    mode, _, g = args.mode.partition(":")
    group = int(g or 0)
    dev = torch.device("cuda")
    ws = torch.zeros(64 << 20, dtype=torch.uint8, device=dev)
    for pt in args.points:
        n, k, m = map(int, pt.split("x"))
        p = gb.Problem(m, n, k, mode, group, dev)
        for _ in range(args.calls):
            gb.run_ours(lib, p, 0, ws)
        torch.cuda.synchronize()
        print(f"{pt}: variant {lib.fk_gemm_pick(m, n, k, gb.kind_of(lib, p), group)}", flush=True)


if __name__ == "__main__":
    main()

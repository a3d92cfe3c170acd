#!/usr/bin/env python3
"""The compute-bound matrix products under sustained load (NVIDIA): feather's pick against cuBLAS
fp16, each as a CUDA graph of --chain calls over rotating weight copies, the two graphs replayed
in turns for about --seconds, so that the GPU runs at the clocks its power limit allows (an H100
drops from 1980 MHz to 1100-1600 within a second of such load). Prints the medians per call, their
ratio and the SM clocks and power that nvidia-smi saw meanwhile.

    python3 bench/gemm_sustained.py --lib build/libfeather_kernels.so [--ms 1024,4096]
        [--shapes NxK,...] [--modes tensor,block:128] [--seconds 4] [--variants ws128,sk128]

--variants: other kernel variants (names as in gemm_bench.VARIANTS) timed in the same turns,
each printed on a line of its own below the pick's.
"""
import argparse
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import gemm_bench as gb  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libfeather_kernels.so")
    ap.add_argument("--ms", default="1024,4096")
    ap.add_argument("--shapes", default="3072x3072,12288x3072,3072x12288,8192x8192")
    ap.add_argument("--modes", default="tensor,block:128")
    ap.add_argument("--chain", type=int, default=40)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--variants", default="")
    args = ap.parse_args()
    dev = torch.device("cuda")
    lib = gb.load(args.lib)
    extra = [gb.BY_NAME[v] for v in args.variants.split(",") if v]
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    ws = torch.zeros(64 << 20, dtype=torch.uint8, device=dev)
    print(f"# {torch.cuda.get_device_properties(dev).name}; per call µs, medians of replays in turns")
    print("mode N K M | feather (kernel) | cuBLAS | cuBLAS / feather | SM MHz (median, min) | W (median)")
    for spec in args.modes.split(","):
        mode, _, g = spec.partition(":")
        for sh in args.shapes.split(","):
            n, k = (int(x) for x in sh.split("x"))
            for m in (int(x) for x in args.ms.split(",")):
                p = gb.Problem(m, n, k, mode, int(g or 0), dev)
                pick = gb.VARIANTS[lib.fk_gemm_pick(m, n, k, gb.kind_of(lib, p), int(g or 0))]
                copies = gb.rotating_copies(p.packed, args.chain)
                ours_fns = [lambda c, st, v=v: gb.run_ours(lib, p, v, ws, c, st) for v in [0] + extra]
                jobs = [(fn, copies) for fn in ours_fns] + [(lambda c, st: F.linear(p.a, c),
                                                             gb.rotating_copies(p.w16, args.chain))]
                # one short measurement tells how many replays fill the time asked for
                est = sum(gb.time_chains(jobs, args.chain, flush, reps=1)) * args.chain * 1e-6
                reps = max(5, int(args.seconds / est))
                smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
                                        "-lms", "100"], stdout=subprocess.PIPE, text=True)
                time.sleep(0.3)  # nvidia-smi's first sample
                *ours_all, cub = gb.time_chains(jobs, args.chain, flush, reps=reps)
                ours = ours_all[0]
                smi.terminate()
                samples = [tuple(float(x) for x in line.split(",")) for line in smi.communicate()[0].splitlines()
                           if line.count(",") == 1]
                busy = [s for s in samples if s[1] > 150.0] or samples  # the samples taken under load
                mhz = [s[0] for s in busy]
                print(f"{spec} {n} {k} {m} | {ours:.1f} ({pick}) | {cub:.1f} | {cub / ours:.2f} | "
                      f"{statistics.median(mhz):.0f}, {min(mhz):.0f} | {statistics.median(s[1] for s in busy):.0f}",
                      flush=True)
                for v, t in zip(extra, ours_all[1:]):
                    print(f"  {gb.VARIANTS[v]}: {t:.1f} | {cub / t:.2f}", flush=True)
                del p, jobs, copies
                torch.cuda.empty_cache()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Side-by-side timings of the kernels from several builds of the kernel library, in one
process: every build is first run through the dependent-chain check, then each shape is timed
back to back (a CUDA graph of 20 calls over rotating weight copies, as in gemm_bench.py) and as
single calls, the builds' calls taking turns (gemm_bench.interleaved), in --rounds rounds.
Variant 0 is each build's own pick; a variant a build does not have is left out for it ("-").

    python3 bench/gemm_ab.py NAME=path/libfeather_kernels.so NAME=... [--variants 0,1,2]
        [--ms 1,16] [--mode tensor|channel|block:G] [--shapes NxK,NxK,...]

NAME=path@KIB times that build as on a GPU with at most KIB KiB of shared memory per block
(fk_limit_shared_memory), through a private copy of the library, so that a build can be timed
beside itself: e.g. full=lib.so sm86=lib.so@99.
"""
import argparse
import ctypes
import os
import shutil
import sys
import tempfile

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import gemm_bench as gb  # noqa: E402

SHAPES = ((3072, 3072), (12288, 3072), (3072, 12288), (8192, 8192))


def load_build(spec):
    """NAME=PATH or NAME=PATH@KIB (see the module's text): (NAME, the loaded library)."""
    name, path = spec.split("=", 1)
    path, _, kib = path.partition("@")
    if kib:
        copy = os.path.join(tempfile.mkdtemp(), os.path.basename(path))
        shutil.copy(path, copy)
        path = copy
    lib = gb.load(path)
    if kib:
        lib.fk_limit_shared_memory.argtypes = [ctypes.c_size_t]
        lib.fk_limit_shared_memory(int(kib) * 1024)
    return name, lib


def has_variant(lib, v, p, ws):
    try:
        gb.run_ours(lib, p, v, ws)
        return True
    except RuntimeError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("libs", nargs="+", help="NAME=path of a libfeather_kernels.so[@KiB of shared memory]")
    ap.add_argument("--variants", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ms", default="1,16", help="rows of A")
    ap.add_argument("--mode", default="tensor", help="scale mode: tensor, channel or block:G")
    ap.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES), help="N x K of the weights")
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in sh.split("x")) for sh in args.shapes.split(",")]
    libs = [load_build(a) for a in args.libs]
    variants = [int(v) for v in args.variants.split(",")]
    ms = [int(m) for m in args.ms.split(",")]
    mode, group = (args.mode.split(":") + ["0"])[:2]
    dev = torch.device("cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    ws = torch.zeros(64 << 20, dtype=torch.uint8, device=dev)
    bad = False
    probe = gb.Problem(1, 3072, 3072, "tensor", 0, dev)
    known = {}  # the variants each build has (an older build may lack the newest)
    for name, lib in libs:
        known[name] = [v for v in variants if has_variant(lib, v, probe, ws)]
        failed = gb.dependent_chain_check(lib, dev, ws, [0] + known[name])
        print(f"# dependent chains, {name}: {'FAILED ' + str(failed) if failed else 'ok'}", flush=True)
        bad = bad or bool(failed)
    res = {}
    for (n, k) in shapes:
        for m in ms:
            p = gb.Problem(m, n, k, mode, int(group), dev)
            copies = gb.rotating_copies(p.packed, 20)
            runs = [(name, v, lambda c=None, st=None, lib=lib, v=v: gb.run_ours(lib, p, v, ws, c, st))
                    for name, lib in libs for v in known[name]]
            for _ in range(args.rounds):
                chains = gb.time_chains([(run, copies) for _, _, run in runs], 20, flush)
                singles = gb.timeit_all([run for _, _, run in runs], 20, flush)
                for (name, v, _), chain, single in zip(runs, chains, singles):
                    res.setdefault((n, k, m, v, name), []).append((chain, single))
            del copies, p
            torch.cuda.empty_cache()
    print("back to back us per call, lowest of the rounds [each round] (single call, lowest)")
    print("shape M variant | " + " | ".join(name for name, _ in libs))
    for (n, k) in shapes:
        for m in ms:
            for v in variants:
                cells = []
                for name, _ in libs:
                    r = res.get((n, k, m, v, name))
                    if r is None:
                        cells.append(f"{'-':>6}")
                        continue
                    rounds = " ".join(f"{c:.1f}" for c, _ in r)
                    cells.append(f"{min(c for c, _ in r):6.2f} [{rounds}] ({min(s for _, s in r):5.1f})")
                print(f"{n}x{k} M={m} {gb.VARIANTS.get(v, 'auto')} | " + " | ".join(cells), flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

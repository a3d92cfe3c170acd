#!/usr/bin/env python3
"""How fast can any kernel read a weight's bytes, back to back, on this GPU? Times the read-only
kernels of bench/read_floor.hip over a grid of launch shapes (blocks per multiprocessor, threads,
loads in flight, L2 warm-up before the wait, with and without programmatic dependent launch;
or each block's first bytes copied to shared memory before the wait, the next kernel released
before or after it) for the benchmark's four weight sizes, and the packed weight read in column
tiles as a product over it must (columns per tile, K splits, warps, rows per step), beside the
library's M = 1 and M = 16 products on the same bytes, all in one process and in the same
back-to-back graphs as gemm_bench.py (20 calls over rotating copies totalling over 200 MB). The
best read-only time is the floor: the fraction of the HBM peak it reaches (3.35 TB/s on an H100
SXM, 4.8 on an H200; --peak for others) bounds what the M <= 16 target can ask of any kernel at
that size; the column tiles' best says what is left of it to a kernel that reads this layout.

    make GPU=cuda read-floor bench-gpu
    python3 bench/read_floor.py --floor BUILD/libread_floor.so --lib BUILD/libfeather_kernels.so [--peak TB/s]
        [--shapes NxK,...] [--wide] [--alone T]
"""
import argparse
import ctypes
import itertools
import json
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import gemm_bench as gb  # noqa: E402

SHAPES = ((3072, 3072), (12288, 3072), (3072, 12288), (8192, 8192))
PEAKS = {"H100": 3.35, "H200": 4.8}  # TB/s of HBM, by a word of the device's name
STAGE_SM = 226 << 10  # shared memory per multiprocessor on Hopper, less the runtime's 1 KB per block


def column_tiles(fl, n, k, buf, out, wide):
    """fb_tiles' launches for an n x k weight: ("tiles", columns per tile, K splits, warps, rows per
    step, warm-up steps, sub-tiles per tile), from 100 to 270 blocks, each warp 2 steps or more;
    with wide, also tiles of 768 columns up to whole rows (N), read as 2-32 sub-tiles side by
    side; those whose registers do not fit are left out (tried once, outside any graph)."""
    cands = [("tiles", bn, s, w, r, warm, 1)
             for bn, s, w, r, warm in itertools.product((24, 48, 64, 96, 128, 192, 384), (1, 2, 3, 4, 6, 8, 12, 16),
                                                      (6, 8, 12, 24), (1, 2, 4, 8), (0, 2))
             if n % bn == 0 and 100 <= n // bn * s <= 270 and r * bn >= 32 and -(-r * bn // 32) in (1, 2, 3, 4, 6, 8, 12, 16)
             and k // 16 // (s * w) >= 2 * r]
    if wide:
        splits = sorted(set(range(1, 271)))
        cands += [("tiles", bn, s, cg * kw, r, warm, cg)
                  for bn, cg, kw, r, warm, s in itertools.product(sorted({768, 1024, 1536, 2048, 3072, 4096, n}), (2, 4, 8, 16, 32), (1, 2, 3),
                                                                 (1, 2), (0, 2), splits)
                  if bn <= n and n % bn == 0 and bn % cg == 0 and bn // cg in (24, 32, 48, 64, 96, 128, 192, 256, 384) and cg * kw <= 32
                  and n // bn * s in (128, 132, 264) and -(-r * (bn // cg) // 32) in (1, 2, 3, 4, 6, 8, 12, 16)
                  and k // 16 // (s * kw) >= 2 * r]
    ok = [c for c in cands if fl.fb_tiles_launch(buf.data_ptr(), n, k, *c[1:], 0, out.data_ptr(), None) == 0]
    torch.cuda.synchronize()
    return ok


def stage_share(nbytes, sms, per_sm):
    """A block's share of the weight, in whole 16-byte words, at per_sm blocks per multiprocessor."""
    return -(-nbytes // (16 * per_sm * sms)) * 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--floor", required=True, help="libread_floor.so")
    ap.add_argument("--lib", required=True, help="libfeather_kernels.so")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dump", help="also write every launch shape's time to this JSON file")
    ap.add_argument("--peak", type=float, help="HBM bandwidth in TB/s (default: by the device's name)")
    ap.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES), help="N x K of the weights")
    ap.add_argument("--wide", action="store_true", help="also tiles of 768 columns up to whole K/16 rows")
    ap.add_argument("--alone", type=int, default=0, metavar="T",
                    help="time the best T column-tile launches again with each block holding shared memory "
                         "enough that no block of the next kernel fits beside it")
    args = ap.parse_args()
    name = torch.cuda.get_device_name()
    peak = args.peak or next((v for k, v in PEAKS.items() if k in name), None)
    if peak is None:
        sys.exit(f"read_floor.py: no HBM peak known for {name}: give --peak TB/s")
    fl = ctypes.CDLL(args.floor)
    vp, ci, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
    fl.fb_read_launch.argtypes = [vp, sz, vp, ci, ci, ci, sz, ci, vp]
    fl.fb_read_launch.restype = ci
    fl.fb_stage_launch.argtypes = [vp, sz, vp, ci, ci, sz, ci, vp]
    fl.fb_stage_launch.restype = ci
    fl.fb_tiles_launch.argtypes = [vp, ci, ci, ci, ci, ci, ci, ci, ci, sz, vp, vp]
    fl.fb_tiles_launch.restype = ci
    sms = fl.fb_sm_count()
    lib = gb.load(args.lib)
    dev = torch.device("cuda")
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    ws = torch.zeros(64 << 20, dtype=torch.uint8, device=dev)
    out = torch.empty(sms * 8 * 1024, dtype=torch.int32, device=dev)
    # ("read", blocks/SM, threads, loads in flight, warm-up bytes, dependent launch) and
    # ("stage", blocks/SM, threads, bytes staged, released early), the latter only where two
    # blocks' staging fits a multiprocessor (so that the next kernel's may run beside this one's)
    reads = [("read",) + c for c in itertools.product((1, 2, 4, 8), (256, 512, 1024), (2, 4, 8),
                                                       (0, 1 << 12, 1 << 14, 1 << 16, 1 << 30), (0, 1))
             if c[0] * c[1] <= 2048 and (c[4] or not c[3])]
    dump = {}
    tiled = []
    print(f"# {name}, {sms} SMs; back to back, µs per call, lowest of {args.rounds} rounds")
    print(f"| N×K | MB | read floor µs | its % of {peak} TB/s | its launch (read: blocks/SM, threads, unroll, warm, pdl; "
          "stage: blocks/SM, threads, bytes, early) "
          "| ours M = 1 µs | % | ours M = 16 µs | % | floor / ours M = 1 | floor / ours M = 16 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for n, k in (tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")):
        nbytes = n * k
        best = {}
        configs = reads + [("stage", g, t, st, e) for g, t, st, e in itertools.product(
            (1, 2), (256, 512, 1024), sorted({16 << 10, 32 << 10, 64 << 10, 96 << 10, stage_share(nbytes, sms, 1)}), (0, 1))
            if g * t <= 1024 and st <= stage_share(nbytes, sms, g) and 2 * g * st <= STAGE_SM]
        probs = {m: gb.Problem(m, n, k, "tensor", 0, dev) for m in (1, 16)}
        copies = gb.rotating_copies(probs[1].packed, 20)
        configs += column_tiles(fl, n, k, copies[0], out, args.wide)
        for _ in range(args.rounds):
            for c in configs:

                def read(buf, st, c=c):
                    s = ctypes.c_void_p(st.cuda_stream)
                    if c[0] == "read":
                        _, g, t, u, w, pdl = c
                        rc = fl.fb_read_launch(buf.data_ptr(), nbytes, out.data_ptr(), g * sms, t, u, w, pdl, s)
                    elif c[0] == "tiles":
                        rc = fl.fb_tiles_launch(buf.data_ptr(), n, k, *c[1:], 0, out.data_ptr(), s)
                    else:
                        _, g, t, stage, early = c
                        rc = fl.fb_stage_launch(buf.data_ptr(), nbytes, out.data_ptr(), g * sms, t, stage, early, s)
                    if rc:
                        raise RuntimeError(f"{c}: CUDA error {rc}")
                us = gb.time_chain(read, copies, 20, flush)
                best[c] = min(best.get(c, 1e9), us)
            for m, p in probs.items():
                us = gb.time_chain(lambda buf, st, p=p: gb.run_ours(lib, p, 0, ws, buf, st), copies, 20, flush)
                best[m] = min(best.get(m, 1e9), us)
        cfg = min((c for c in configs if c[0] != "tiles"), key=lambda c: best[c])
        f = best[cfg]
        ct = min((c for c in configs if c[0] == "tiles"), key=lambda c: best[c])
        pct = lambda us: 100 * nbytes / (us * 1e-6) / (peak * 1e12)  # noqa: E731
        print(f"| {n}×{k} | {nbytes / 1e6:.1f} | {f:.2f} | {pct(f):.1f} % | {cfg} | {best[1]:.2f} | {pct(best[1]):.1f} % "
              f"| {best[16]:.2f} | {pct(best[16]):.1f} % | {f / best[1]:.2f} | {f / best[16]:.2f} |", flush=True)
        tiled.append(f"| {n}×{k} | {f:.2f} ({pct(f):.1f} %) | {best[ct]:.2f} ({pct(best[ct]):.1f} %) | {ct[1:]} "
                     f"| {best[1]:.2f} ({pct(best[1]):.1f} %) | {best[16]:.2f} ({pct(best[16]):.1f} %) |")
        if args.alone:
            # the best tile launches again, no block of the next kernel beside theirs: occ blocks of
            # this one per multiprocessor fit its shared memory, occ + 1 do not
            alone = {}
            for c in sorted((c for c in configs if c[0] == "tiles"), key=lambda c: best[c])[:args.alone]:
                occ = -(-(n // c[1] * c[2]) // sms)
                hold = ((STAGE_SM + (2 << 10)) // occ - (1 << 10)) & ~1023
                for _ in range(args.rounds):
                    def read(buf, st, c=c, hold=hold):
                        rc = fl.fb_tiles_launch(buf.data_ptr(), n, k, *c[1:], hold, out.data_ptr(), ctypes.c_void_p(st.cuda_stream))
                        if rc:
                            raise RuntimeError(f"{c} holding {hold}: CUDA error {rc}")
                    alone[c] = min(alone.get(c, 1e9), gb.time_chain(read, copies, 20, flush))
                print(f"#   tiles {c[1:]}: {best[c]:.2f} µs ({pct(best[c]):.1f} %), with no block beside "
                      f"({hold >> 10} KB each, {occ} per SM): {alone[c]:.2f} µs ({pct(alone[c]):.1f} %)", flush=True)
            ca = min(alone, key=alone.get)
            print(f"#   column tiles with no block beside, best: {alone[ca]:.2f} µs ({pct(alone[ca]):.1f} %) {ca[1:]}; "
                  f"ours M = 1 {best[1]:.2f}, M = 16 {best[16]:.2f}")
        if args.wide:
            # the best launch at each tile width: what the width alone gives
            for bn in sorted({c[1] for c in configs if c[0] == "tiles"}):
                cb = min((c for c in configs if c[0] == "tiles" and c[1] == bn), key=lambda c: best[c])
                print(f"#   tiles of {bn} columns: {best[cb]:.2f} µs ({pct(best[cb]):.1f} %) {cb[1:]}")
        top = sorted((c for c in configs if c[0] != "tiles"), key=lambda c: best[c])[:5]
        print("#   next best: " + "; ".join(f"{c} {best[c]:.2f}" for c in top[1:]))
        nopdl = [c for c in configs if c[0] == "read" and not c[5]]
        c0 = min(nopdl, key=lambda c: best[c])
        print(f"#   best without dependent launch: {c0} {best[c0]:.2f}")
        cs = min((c for c in configs if c[0] == "stage"), key=lambda c: best[c])
        print(f"#   best staged in shared memory: {cs} {best[cs]:.2f}")
        dump[f"{n}x{k}"] = {str(c): best[c] for c in best}
    print("\nThe packed weight read in column tiles (fb_tiles), as a product over it reads it:")
    print("| N×K | contiguous floor µs (%) | column tiles µs (%) | their columns, K splits, warps, rows per step, "
          "warm-up steps, sub-tiles | ours M = 1 µs (%) | ours M = 16 µs (%) |")
    print("|---|---|---|---|---|---|")
    print("\n".join(tiled))
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump(dump, f, indent=0)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""GPU matrix-product benchmark (NVIDIA): feather's fp16 x e5m2 kernels against
cuBLAS fp16 (torch.nn.functional.linear), torch's upcast-then-matmul and torch._scaled_mm (e4m3).

Every timed call is preceded by a read of a 256 MiB buffer that evicts the L2 cache (a read, not
a write: a write would leave up to 50 MB of dirty lines whose write-back then competes with the
timed call's reads), and is timed alone with CUDA events; the median of --reps calls is reported.
At each point the variants and the baselines take turns, call by call, so that they meet the
same clocks (an H100 under sustained load runs into its power limit within a second). The pick
and cuBLAS are also timed back to back, and at M <= 16 every variant (one CUDA graph of --chain
calls over rotating weight copies totalling over 200 MB, so every call reads its weight from
memory and launch gaps vanish). Every feather variant's output is checked against an fp32
product of the same dequantised weights before it is timed.

    python3 bench/gemm_bench.py --lib build/libfeather_kernels.so --out DIR
"""
import argparse
import ctypes
import json
import os
import re
import statistics
import sys

import torch
import torch.nn.functional as F

# the kernel variants of kernels/fk_api.h by number (FK_VARIANT_SKINNY16 = 1 is "skinny16"), auto left out
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels", "fk_api.h")) as _f:
    VARIANTS = {int(v): name.lower() for name, v in re.findall(r"\bFK_VARIANT_(\w+) = (\d+)", _f.read()) if v != "0"}
BY_NAME = {name: v for v, name in VARIANTS.items()}
MAX_M = {1: 16, 2: 32}                          # skinny variants: largest M
HOPPER = tuple(v for v in VARIANTS if v >= BY_NAME["ws128"])  # the wgmma kernels: ws128 and after
MIN_M = {v: 64 for v in HOPPER}                 # Hopper variants: from these M here
KIND = {"none": 0, "tensor": 1, "channel": 2, "block": 3}
BLOCK_RS = 4  # block scales checked as feather_gemm checks them (normal, within [2^-126, 2^126] and 2^40 of each other)


def kind_of(lib, p_or_mode):
    """The scale kind feather_gemm would pass: for block scales that pass its check (a
    Problem's scales_ok), BLOCK_RS where the library knows that kind."""
    mode = getattr(p_or_mode, "mode", p_or_mode)
    if mode != "block" or not getattr(p_or_mode, "scales_ok", True) or not lib.block_rs:
        return KIND[mode]
    return BLOCK_RS


def load(path):
    lib = ctypes.CDLL(path)
    i64, vp, ci = ctypes.c_int64, ctypes.c_void_p, ctypes.c_int
    lib.fk_gemm.argtypes = [i64, i64, i64, vp, vp, vp, ci, ci, vp, ci, vp, vp, ctypes.c_size_t, ci, vp]
    lib.fk_gemm.restype = ci
    lib.fk_gemm_workspace.argtypes = [i64, i64, i64, ci, ci, ci]
    lib.fk_gemm_workspace.restype = ctypes.c_size_t
    lib.fk_gemm_pick.argtypes = [i64, i64, i64, ci, ci]
    lib.fk_gemm_pick.restype = ci
    lib.fk_error_string.argtypes = [ci]
    lib.fk_error_string.restype = ctypes.c_char_p
    # does the library know BLOCK_RS? (a build from before it answers "invalid value")
    dev = torch.device("cuda")
    a = torch.zeros(16, 64, dtype=torch.float16, device=dev)
    q = torch.zeros(64 * 64, dtype=torch.uint8, device=dev)
    s = torch.ones(64, dtype=torch.float32, device=dev)
    y = torch.empty(16, 64, dtype=torch.float16, device=dev)
    lib.block_rs = lib.fk_gemm(16, 64, 64, a.data_ptr(), q.data_ptr(), s.data_ptr(), BLOCK_RS, 64, None, 0,
                               y.data_ptr(), None, 0, 0, None) == 0
    torch.cuda.synchronize()
    return lib


def evict(flush):
    flush.max()  # reads the whole buffer: the L2 is left holding clean lines of it


def interleaved(calls, reps, flush):
    """Times each of calls (no arguments) after an L2 eviction, the calls of all of them taking
    turns (A B C A B C ...), and returns each one's median in microseconds. Taking turns gives
    them the same clocks: under sustained load an H100 reaches its 700 W limit within a second
    and its clocks fall from 1980 MHz to 1100-1600, so timings taken one function after another
    compare different clocks."""
    ev = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in calls]
          for _ in range(reps)]
    for row in ev:
        for fn, (s, e) in zip(calls, row):
            evict(flush)
            s.record()
            fn()
            e.record()
        torch.cuda.synchronize()  # a row at a time: no long queue of events ahead of the clock
    return [statistics.median(row[i][0].elapsed_time(row[i][1]) for row in ev) * 1e3 for i in range(len(calls))]


def timeit_all(fns, reps, flush):
    """Single calls of each of fns, interleaved (above); microseconds, median of reps."""
    for fn in fns:
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    return interleaved(fns, reps, flush)


def rotating_copies(t, chain):
    """t and copies of it, enough that a chain of calls cycling over them reads over 200 MB, so
    that every call finds its weight out of L2 (two at least, and no more than the chain's
    calls)."""
    n = max(2, min(chain, -(-(200 << 20) // (t.numel() * t.element_size()))))
    return [t] + [t.clone() for _ in range(n - 1)]


def time_chains(jobs, chain, flush, reps=7):
    """jobs: (fn, copies) pairs, fn(weight_copy, stream) one call. Times, for each, a CUDA graph
    of `chain` calls cycling over its copies, the graphs' replays interleaved (above); returns
    microseconds per call (median of reps replays) for each."""
    st = torch.cuda.Stream()
    graphs = []
    for fn, copies in jobs:
        with torch.cuda.stream(st):
            for c in copies:
                fn(c, st)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=st):
            for i in range(chain):
                fn(copies[i % len(copies)], st)
        g.replay()
        # before the next job's warm-up on st: replays run on the current stream, and the jobs
        # share the kernels' workspace (split counters), which two at once would corrupt
        torch.cuda.synchronize()
        graphs.append(g)
    us = interleaved([g.replay for g in graphs], reps, flush)
    del graphs
    return [u / chain for u in us]


def time_chain(fn, copies, chain, flush, reps=7):
    return time_chains([(fn, copies)], chain, flush, reps)[0]


class Problem:
    def __init__(self, m, n, k, mode, group, dev):
        g = torch.Generator(device=dev)
        g.manual_seed(m * 7919 + n * 31 + k)
        self.m, self.n, self.k, self.mode, self.group = m, n, k, mode, group
        self.a = torch.randn(m, k, device=dev, generator=g).half()
        w = torch.randn(n, k, device=dev, generator=g) * 8
        self.q = w.to(torch.float8_e5m2)                                   # (N, K) plain
        self.packed = self.q.view(torch.uint8).view(n, k // 16, 16).permute(1, 0, 2).contiguous()
        if mode == "block":
            self.scales = (0.5 + torch.rand(n, k // group, device=dev, generator=g)) / 64
            sfull = self.scales.repeat_interleave(group, dim=1)
        elif mode == "channel":
            self.scales = (0.5 + torch.rand(n, device=dev, generator=g)) / 64
            sfull = self.scales[:, None]
        else:
            self.scales = torch.full((1,), 1 / 64, device=dev)
            sfull = self.scales
        v = self.scales.abs()  # feather_gemm's check of block scales (normal, within [2^-126, 2^126] and 2^40 of each other)
        self.scales_ok = bool(((v >= 2.0**-126) & (v <= 2.0**126)).all() and v.max() <= v.min() * 2.0**40)
        self.w_deq = self.q.float() * sfull                                # fp32 (N, K)
        self.w16 = self.w_deq.half()
        self.y = torch.empty(m, n, device=dev, dtype=torch.bfloat16)

    def reference(self):
        return F.linear(self.a.float(), self.w_deq)


def run_ours(lib, p, variant, ws, packed=None, stream=None):
    packed = p.packed if packed is None else packed
    rc = lib.fk_gemm(p.m, p.n, p.k, p.a.data_ptr(), packed.data_ptr(), p.scales.data_ptr(), kind_of(lib, p),
                     p.group, None, 1, p.y.data_ptr(), ws.data_ptr(), ws.numel(), variant,
                     stream.cuda_stream if stream is not None else None)
    if rc:
        raise RuntimeError("fk_gemm: " + lib.fk_error_string(rc).decode())


def dependent_chain_check(lib, dev, ws, variants, layers=4):
    """Back-to-back launches may overlap (programmatic dependent launch): run `layers` products
    where each one's A is the previous one's output, with no synchronisation between them, and
    compare with the same chain in fp32 (fp16 rounding between layers). A launch that read its
    input too early would be off by far more than rounding. Returns the failures."""
    bad = []
    for n in (3072, 8192):
        for m in (1, 16, 1024):
            g = torch.Generator(device=dev)
            g.manual_seed(n + m)
            q = (torch.randn(n, n, device=dev, generator=g) * 8).to(torch.float8_e5m2)
            packed = q.view(torch.uint8).view(n, n // 16, 16).permute(1, 0, 2).contiguous()
            scale = torch.full((1,), 1.0 / (8 * n ** 0.5), device=dev)  # keeps each layer's output ~N(0, 1)
            w = q.float() * scale
            x0 = torch.randn(m, n, device=dev, generator=g).half()
            ref = x0
            for _ in range(layers):
                ref = (ref.float() @ w.t()).half()
            for v in variants:
                if m > MAX_M.get(v, 1 << 30) or m < MIN_M.get(v, 0):
                    continue
                xs = [x0] + [torch.full((m, n), float("nan"), device=dev, dtype=torch.float16) for _ in range(layers)]
                for i in range(layers):
                    rc = lib.fk_gemm(m, n, n, xs[i].data_ptr(), packed.data_ptr(), scale.data_ptr(), KIND["tensor"], 0,
                                     None, 0, xs[i + 1].data_ptr(), ws.data_ptr(), ws.numel(), v, None)
                    if rc:
                        raise RuntimeError("fk_gemm: " + lib.fk_error_string(rc).decode())
                torch.cuda.synchronize()
                err = ((xs[-1].float() - ref.float()).norm() / ref.float().norm()).item()
                ok = err <= 5e-3
                print(f"# dependent chain {VARIANTS.get(v, 'auto')} M={m} N=K={n}, {layers} layers: rel err {err:.2g}"
                      f"{'' if ok else '  WRONG'}", flush=True)
                if not ok:
                    bad.append((v, m, n))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libfeather_kernels.so")
    ap.add_argument("--out", default=".")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--ms", default="1,16,64,128,1024,4096")
    ap.add_argument("--shapes", default="3072x3072,12288x3072,3072x12288,8192x8192")
    ap.add_argument("--modes", default="tensor,block:128")
    ap.add_argument("--variants", default="all", help="all or a comma list of variant numbers")
    ap.add_argument("--chain", type=int, default=20, help="calls per graph in the back-to-back timing (0: none)")
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False  # an fp32 reference, and cuBLAS fp16 as is
    lib = load(args.lib)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    ws = torch.zeros(64 << 20, dtype=torch.uint8, device=dev)
    props = torch.cuda.get_device_properties(dev)
    print(f"# {props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}", flush=True)
    chain_variants = [0] + [v for v in VARIANTS if args.variants == "all" or str(v) in args.variants.split(",")]
    dependent_chain_check(lib, dev, ws, chain_variants)
    ms = [int(x) for x in args.ms.split(",")]
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    modes = []
    for s in args.modes.split(","):
        name, _, g = s.partition(":")
        modes.append((name, int(g) if g else 0))
    results = []
    for mode, group in modes:
        for (n, k) in shapes:
            for m in ms:
                if mode != "tensor" and m not in (16, 64, 1024, 4096):
                    continue  # other scale modes: two bandwidth-bound and two compute-bound sizes
                p = Problem(m, n, k, mode, group, dev)
                ref = p.reference()
                rec = {"mode": f"{mode}:{group}" if group else mode, "m": m, "n": n, "k": k, "ours": {}}
                auto = lib.fk_gemm_pick(m, n, k, kind_of(lib, p), group)
                rec["auto"] = VARIANTS[auto]
                cand = [v for v in VARIANTS if args.variants == "all" or str(v) in args.variants.split(",")]
                for v in cand:
                    if m > MAX_M.get(v, 1 << 30) or m < MIN_M.get(v, 0):
                        continue
                    if v in HOPPER and mode == "block" and group % 64:
                        continue
                    need = lib.fk_gemm_workspace(m, n, k, kind_of(lib, p), group, v)
                    if need > ws.numel():
                        ws = torch.zeros(need, dtype=torch.uint8, device=dev)
                    p.y.fill_(float("nan"))
                    try:
                        run_ours(lib, p, v, ws)
                    except RuntimeError as e:  # a variant that refuses (say so, time the others)
                        rec["ours"][VARIANTS[v]] = {"error": str(e)}
                        print(f"FAILED {VARIANTS[v]} {mode} M={m} N={n} K={k}: {e}", flush=True)
                        continue
                    torch.cuda.synchronize()
                    err = ((p.y.float() - ref).norm() / ref.norm()).item()
                    entry = {"rel_err": err}
                    if not err <= 2e-3:
                        entry["wrong"] = True
                        print(f"WRONG {VARIANTS[v]} {mode} M={m} N={n} K={k}: rel err {err:.3g}", flush=True)
                    rec["ours"][VARIANTS[v]] = entry
                # every variant that gave the right product, and the baselines, timed in turns
                good = [v for v in cand if rec["ours"].get(VARIANTS[v], {}).get("rel_err", 1.0) <= 2e-3]
                timed = {"cublas_fp16_us": lambda: F.linear(p.a, p.w16)}
                # upcast-then-matmul as torch code would write it: tensor and channel scales on the
                # product, block scales on the fp16 weight before it
                s16 = p.scales.half()
                if mode == "block":
                    sb = s16.view(n, k // group, 1)
                    upcast = lambda: F.linear(p.a, (p.q.to(torch.float16).view(n, k // group, group) * sb).view(n, k))
                else:
                    upcast = lambda: F.linear(p.a, p.q.to(torch.float16)) * s16
                timed["upcast_us"] = upcast
                if mode == "tensor":
                    try:
                        a8 = p.a.to(torch.float8_e4m3fn)
                        w8 = p.w16.to(torch.float8_e4m3fn)
                        one = torch.ones((), device=dev)
                        f = lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                        f()
                        timed["scaled_mm_e4m3_us"] = f
                    except Exception as e:  # shapes cuBLASLt's fp8 path refuses
                        rec["scaled_mm_e4m3_us"] = None
                        rec["scaled_mm_error"] = str(e).splitlines()[0][:120]
                us = timeit_all([lambda v=v: run_ours(lib, p, v, ws) for v in good] + list(timed.values()), args.reps, flush)
                for v, t in zip(good, us):
                    rec["ours"][VARIANTS[v]]["us"] = t
                rec.update(zip(timed, us[len(good):]))
                if args.chain > 0 and auto in good:
                    # back to back, in turns: cuBLAS and the pick, and at M <= 16 every variant
                    chained = good if m <= 16 else [auto]
                    copies = rotating_copies(p.packed, args.chain)
                    jobs = [(lambda c, st, v=v: run_ours(lib, p, v, ws, c, st), copies) for v in chained]
                    jobs.append((lambda c, st: F.linear(p.a, c), rotating_copies(p.w16, args.chain)))
                    us = time_chains(jobs, args.chain, flush)
                    for v, t in zip(chained, us):
                        rec["ours"][VARIANTS[v]]["chain_us"] = t
                    rec["cublas_chain_us"] = us[-1]
                    rec["chain_us"] = rec["ours"][rec["auto"]]["chain_us"]
                    del copies, jobs
                ok = {kv: e["us"] for kv, e in rec["ours"].items() if "us" in e}
                rec["best"] = min(ok, key=ok.get) if ok else None
                results.append(rec)
                print(json.dumps(rec), flush=True)
                del p, ref
                torch.cuda.empty_cache()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "gemm_bench.json"), "w") as f:
        json.dump(results, f, indent=1)

    # table
    print()
    hdr = (f"{'mode':9} {'N':>5} {'K':>5} {'M':>5} | {'auto':8} {'us':>8} {'TB/s W':>6} {'TF/s':>6} | "
           f"{'best':8} {'us':>8} | {'cuBLAS':>8} {'TF/s':>6} {'x':>5} | {'upcast':>8} {'x':>5} | {'fp8mm':>7}")
    print(hdr)
    print("-" * len(hdr))
    for r in results:
        o = r["ours"]
        au = o.get(r["auto"], {}).get("us")
        best = r["best"]
        bu = o[best]["us"] if best else None
        flops = 2.0 * r["m"] * r["n"] * r["k"]
        wbytes = r["n"] * r["k"]

        def fmt(x, f="{:8.1f}"):
            return f.format(x) if x is not None else " " * (len(f.format(0.0)) - 3) + "n/a"
        cb = r.get("cublas_fp16_us")
        up = r.get("upcast_us")
        sm = r.get("scaled_mm_e4m3_us")
        line = (f"{r['mode']:9} {r['n']:5d} {r['k']:5d} {r['m']:5d} | {r['auto']:8} {fmt(au)} "
                f"{fmt(wbytes / au / 1e6 if au else None, '{:6.2f}')} {fmt(flops / au / 1e6 if au else None, '{:6.1f}')} | "
                f"{best or '-':8} {fmt(bu)} | {fmt(cb)} {fmt(flops / cb / 1e6 if cb else None, '{:6.1f}')} "
                f"{fmt(cb / au if cb and au else None, '{:5.2f}')} | {fmt(up)} {fmt(up / au if up and au else None, '{:5.2f}')} | "
                f"{fmt(sm, '{:7.1f}')}")
        print(line)
    print("x = their time / feather auto time (above 1: feather faster). TB/s W = weight bytes (N*K) / time.")
    chained = [r for r in results if "chain_us" in r]
    if chained:
        print()
        print("back to back (CUDA graph of --chain calls, rotating weight copies):")
        print(f"{'mode':9} {'N':>5} {'K':>5} {'M':>5} | {'auto':8} {'us':>8} {'TB/s W':>6} {'TF/s':>6} | "
              f"{'cuBLAS':>8} {'TB/s':>6} {'TF/s':>6} {'x':>5}")
        for r in chained:
            cu = r["chain_us"]
            cb = r["cublas_chain_us"]
            wb, fl = r["n"] * r["k"], 2.0 * r["m"] * r["n"] * r["k"]
            print(f"{r['mode']:9} {r['n']:5d} {r['k']:5d} {r['m']:5d} | {r['auto']:8} {cu:8.1f} {wb / cu / 1e6:6.2f} "
                  f"{fl / cu / 1e6:6.1f} | {cb:8.1f} {2 * wb / cb / 1e6:6.2f} {fl / cb / 1e6:6.1f} {cb / cu:5.2f}")
    small = [r for r in results if r["m"] <= 32 and len(r["ours"]) > 1]
    if small:
        print()
        print("M <= 32, every variant: us per call (back to back in brackets), TB/s of weight per call:")
        for r in small:
            cells = []
            for name, e in r["ours"].items():
                if "us" in e:
                    ch = f" ({e['chain_us']:.1f})" if "chain_us" in e else ""
                    cells.append(f"{name} {e['us']:.1f}{ch} {r['n'] * r['k'] / e['us'] / 1e6:.2f}")
            print(f"{r['mode']:9} {r['n']:5d} {r['k']:5d} {r['m']:3d} | " + " | ".join(cells))


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""GPU matrix-product benchmark (NVIDIA): feather's fp16 x e5m2 kernels against
cuBLAS fp16 (torch.nn.functional.linear), torch's upcast-then-matmul and torch._scaled_mm (e4m3).

Every timed call is preceded by a 256 MiB write that evicts the L2 cache, timed alone with CUDA
events; the median of --reps calls is reported. Every feather variant's output is checked
against an fp32 product of the same dequantised weights before it is timed.

    python3 bench/gemm_bench.py --lib build/libfeather_kernels.so --out DIR
"""
import argparse
import ctypes
import json
import os
import statistics
import sys

import torch
import torch.nn.functional as F

VARIANTS = {1: "skinny16", 2: "skinny32", 3: "tile64", 4: "tile128", 5: "tile256", 6: "wgmma", 7: "wgmma64", 8: "wgmma256"}
KIND = {"none": 0, "tensor": 1, "channel": 2, "block": 3}


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
    return lib


def timeit(fn, reps, flush):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for s, e in ev:
        flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev) * 1e3  # microseconds


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
        self.w_deq = self.q.float() * sfull                                # fp32 (N, K)
        self.w16 = self.w_deq.half()
        self.y = torch.empty(m, n, device=dev, dtype=torch.bfloat16)

    def reference(self):
        return F.linear(self.a.float(), self.w_deq)


def run_ours(lib, p, variant, ws):
    rc = lib.fk_gemm(p.m, p.n, p.k, p.a.data_ptr(), p.packed.data_ptr(), p.scales.data_ptr(), KIND[p.mode],
                     p.group, None, 1, p.y.data_ptr(), ws.data_ptr(), ws.numel(), variant, None)
    if rc:
        raise RuntimeError("fk_gemm: " + lib.fk_error_string(rc).decode())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", default="build/libfeather_kernels.so")
    ap.add_argument("--out", default=".")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--ms", default="1,16,64,128,1024,4096")
    ap.add_argument("--shapes", default="3072x3072,12288x3072,3072x12288,8192x8192")
    ap.add_argument("--modes", default="tensor,block:128")
    ap.add_argument("--variants", default="all", help="all or a comma list of variant numbers")
    args = ap.parse_args()
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False  # an fp32 reference, and cuBLAS fp16 as is
    lib = load(args.lib)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    ws = torch.zeros(64 << 20, dtype=torch.uint8, device=dev)
    props = torch.cuda.get_device_properties(dev)
    print(f"# {props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}", flush=True)
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
                if mode != "tensor" and m not in (16, 4096):
                    continue  # other scale modes: one bandwidth-bound and one compute-bound size
                p = Problem(m, n, k, mode, group, dev)
                ref = p.reference()
                rec = {"mode": f"{mode}:{group}" if group else mode, "m": m, "n": n, "k": k, "ours": {}}
                auto = lib.fk_gemm_pick(m, n, k, KIND[mode], group)
                rec["auto"] = VARIANTS[auto]
                cand = [v for v in VARIANTS if args.variants == "all" or str(v) in args.variants.split(",")]
                for v in cand:
                    if (v == 1 and m > 16) or (v == 2 and m > 32) or (v in (6, 7, 8) and m < 64):
                        continue
                    if v >= 6 and mode == "block" and group % 64:
                        continue
                    need = lib.fk_gemm_workspace(m, n, k, KIND[mode], group, v)
                    if need > ws.numel():
                        ws = torch.zeros(need, dtype=torch.uint8, device=dev)
                    p.y.fill_(float("nan"))
                    run_ours(lib, p, v, ws)
                    torch.cuda.synchronize()
                    err = ((p.y.float() - ref).norm() / ref.norm()).item()
                    entry = {"rel_err": err}
                    if not err <= 2e-3:
                        entry["wrong"] = True
                        print(f"WRONG {VARIANTS[v]} {mode} M={m} N={n} K={k}: rel err {err:.3g}", flush=True)
                    else:
                        entry["us"] = timeit(lambda: run_ours(lib, p, v, ws), args.reps, flush)
                    rec["ours"][VARIANTS[v]] = entry
                if mode == "tensor":
                    rec["cublas_fp16_us"] = timeit(lambda: F.linear(p.a, p.w16), args.reps, flush)
                    s16 = p.scales.half()
                    rec["upcast_us"] = timeit(lambda: F.linear(p.a, p.q.to(torch.float16)) * s16, args.reps, flush)
                    try:
                        a8 = p.a.to(torch.float8_e4m3fn)
                        w8 = p.w16.to(torch.float8_e4m3fn)
                        one = torch.ones((), device=dev)
                        f = lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                        f()
                        rec["scaled_mm_e4m3_us"] = timeit(f, args.reps, flush)
                    except Exception as e:  # shapes cuBLASLt's fp8 path refuses
                        rec["scaled_mm_e4m3_us"] = None
                        rec["scaled_mm_error"] = str(e).splitlines()[0][:120]
                ok = {kv: e["us"] for kv, e in rec["ours"].items() if "us" in e}
                rec["best"] = min(ok, key=ok.get) if ok else None
                results.append(rec)
                print(json.dumps(rec), flush=True)
                del p, ref
                torch.cuda.empty_cache()
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


if __name__ == "__main__":
    sys.exit(main())

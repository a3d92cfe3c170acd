"""Times feather-convert on quantised inputs: ComfyUI NVFP4 and e4m3 layers, side by side for
several builds.

    python3 bench/quantised_input_bench.py WORKDIR NAME=BINDIR [NAME=BINDIR ...] [--layers L] [--rounds R]

Writes two checkpoints of L layers [3072, 12288] (random codes; NVFP4 with E4M3 block scales
in ComfyUI's tiles and a tensor scale, tagged by comfy_quant tensors; e4m3 with one scale per
tensor) and one BF16 layer, then converts each with every build in turn, R rounds: requantised
at --scale channel and block:16, and dequantised to BF16 (--exclude). Prints the median wall time and the rate in
input values per second. The files sit in WORKDIR (use /dev/shm to leave the disk out).
"""
import json
import os
import statistics
import struct
import subprocess
import sys
import time

argv = sys.argv[1:]
layers = int(argv[argv.index("--layers") + 1]) if "--layers" in argv else 6
rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 3
work, builds = argv[0], [a.split("=", 1) for a in argv[1:] if "=" in a]
os.makedirs(work, exist_ok=True)
N, K = 3072, 12288


def save(path, tensors):
    head, off = {}, 0
    for name, dt, shape, data in tensors:
        head[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        off += len(data)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for t in tensors:
            f.write(t[3])


def e4m3_codes(n):
    """Random e4m3 codes without the NaN ones (0x7f, 0xff)."""
    return bytes(b if b & 0x7f != 0x7f else b ^ 1 for b in os.urandom(n))


nv, e4 = [], []
tag = json.dumps({"format": "nvfp4"}).encode()
for i in range(layers):
    p = f"blocks.{i}.mlp.fc1"
    nv += [(p + ".weight", "U8", [N, K // 2], os.urandom(N * K // 2)),
           (p + ".weight_scale", "F8_E4M3", [N, K // 16], bytes(8 + b % 0x60 for b in os.urandom(N * K // 16))),
           (p + ".weight_scale_2", "F32", [], struct.pack("<f", 1e-3)),
           (p + ".comfy_quant", "U8", [len(tag)], tag)]
    e4 += [(p + ".weight", "F8_E4M3", [N, K], e4m3_codes(N * K)),
           (p + ".weight_scale", "F32", [], struct.pack("<f", 1e-4))]
# one BF16 layer, for the conversion that keeps every quantised one to convert
extra = [("extra.weight", "BF16", [64, 64], bytes(2 * 64 * 64))]
save(os.path.join(work, "nvfp4.safetensors"), nv + extra)
save(os.path.join(work, "e4m3.safetensors"), e4 + extra)
values = layers * N * K
print(f"{layers} layers [{N}, {K}], {values} values per file, {os.cpu_count()} cores, median of {rounds}")
for src in ("nvfp4", "e4m3"):
    for label, extra in (("channel", ["--scale", "channel"]), ("block:16", ["--scale", "block:16"]),
                         ("to BF16", ["--exclude", "blocks"])):
        times = {}
        for _ in range(rounds):
            for name, bindir in builds:
                cmd = [os.path.join(bindir, "feather-convert"), "-q", "--force", "--device", "cpu", *extra, "-o",
                       os.path.join(work, "out.safetensors"), os.path.join(work, src + ".safetensors")]
                t0 = time.perf_counter()
                r = subprocess.run(cmd, capture_output=True, text=True)
                dt = time.perf_counter() - t0
                if r.returncode:
                    dt = float("nan")
                    print(name, src, label, "rc", r.returncode, r.stderr.strip()[:200])
                times.setdefault(name, []).append(dt)
        row = ", ".join(f"{n} {statistics.median(t):.2f} s ({values / statistics.median(t) / 1e6:.0f} M values/s)"
                        for n, t in times.items())
        print(f"{src:6} {label:9}: {row}")

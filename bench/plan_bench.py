"""Times feather-convert's plan on a file of many small tensors, laid out as DeepSeek-V3's experts.

    python3 bench/plan_bench.py BINDIR WORKDIR [LAYERS]

Writes WORKDIR/many.safetensors: LAYERS (default 61) layers x 256 experts x 3 projections, each an
e4m3 weight [16, 32] with its scale (X.weight_scale_inv of one block, as DeepSeek-V3 stores them),
93696 tensors for 61 layers; then times, best of 3, `feather-convert --plan` and a conversion
followed by the rerun that finds it up to date. The weights are tiny on purpose: what is timed is
the per-tensor work of the plan, not the data.
"""
import json
import os
import struct
import subprocess
import sys
import time

bindir, work = sys.argv[1:3]
layers = int(sys.argv[3]) if len(sys.argv) > 3 else 61
os.makedirs(work, exist_ok=True)
head, off = {}, 0
for l in range(layers):
    for e in range(256):
        for p in ("gate_proj", "up_proj", "down_proj"):
            base = f"model.layers.{l}.mlp.experts.{e}.{p}"
            head[base + ".weight"] = {"dtype": "F8_E4M3", "shape": [16, 32], "data_offsets": [off, off + 512]}
            head[base + ".weight_scale_inv"] = {"dtype": "F32", "shape": [1, 1], "data_offsets": [off + 512, off + 516]}
            off += 516
blob = (bytes([0x38]) * 512 + struct.pack("<f", 1.0)) * (off // 516)  # e4m3 1.0, scale 1
h = json.dumps(head).encode()
h += b" " * (-len(h) % 8)
src = os.path.join(work, "many.safetensors")
with open(src, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + blob)
conv = os.path.join(bindir, "feather-convert")


def best(*args):
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([conv, *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return min(times)


out = os.path.join(work, "many-out.safetensors")
print(f"{len(head)} tensors: --plan {best('--plan', src):.2f} s; "
      f"conversion {best('-q', '--force', '-o', out, src):.2f} s; up to date {best('-q', '-o', out, src):.2f} s")

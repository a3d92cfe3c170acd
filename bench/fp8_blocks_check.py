"""Checks feather's reading of fp8 checkpoints with scales of 128 x 128 blocks against torch.

    python3 bench/fp8_blocks_check.py BINDIR WORKDIR

Writes a DeepSeek-style checkpoint with torch (e4m3 weights, X.weight_scale_inv of shape
[ceil(N/128), ceil(K/128)], rows not a multiple of 128 included). A layer feather-convert keeps
(--exclude) is dequantised to BF16 and must equal torch's own dequantisation to the bit; the
converted file must be the same from the CPU and the GPU, and feather-verify --reference must
pass on it.
"""
import os
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file

bindir, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)
shapes = {"model.layers.0.mlp.down_proj.weight": (7168, 2048),
          "model.layers.0.mlp.up_proj.weight": (2048, 7168),
          "model.layers.0.self_attn.kv_a_proj_with_mqa.weight": (576, 7168)}


def spread(s, n, k):
    """Block scales [ceil(n/128), ceil(k/128)] as one per element [n, k]."""
    return s.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]


gen = torch.Generator().manual_seed(7)
tensors = {}
for name, (n, k) in shapes.items():
    w = torch.randn(n, k, generator=gen) * 0.02
    s = torch.rand((n + 127) // 128, (k + 127) // 128, generator=gen) * 1e-3 + 1e-4
    tensors[name] = (w / spread(s, n, k)).clamp(-448, 448).to(torch.float8_e4m3fn)
    tensors[name + "_scale_inv"] = s
src = os.path.join(work, "ds.safetensors")
save_file(tensors, src)


def convert(*args, cwd=None):
    subprocess.run([os.path.join(bindir, "feather-convert"), "-q", "--force", *args], check=True, cwd=cwd)


kept = "model.layers.0.self_attn.kv_a_proj_with_mqa.weight"
convert("--device", "cpu", "--exclude", "kv_a_proj", "-o", os.path.join(work, "deq.safetensors"), src)
got = load_file(os.path.join(work, "deq.safetensors"))[kept]
q, s = tensors[kept], tensors[kept + "_scale_inv"]
want = (q.float() * spread(s, *q.shape)).to(torch.bfloat16)
differ = (got.view(torch.int16) != want.view(torch.int16)).sum().item()
assert got.dtype == torch.bfloat16 and differ == 0, f"{differ} BF16 values differ from torch's"
outs = []
for dev in ("cpu", "gpu"):
    d = os.path.join(work, dev)
    os.makedirs(d, exist_ok=True)
    convert("--device", dev, "--scale", "block:128", "-o", "out.safetensors", src, cwd=d)
    with open(os.path.join(d, "out.safetensors"), "rb") as f:
        outs.append(f.read())
assert outs[0] == outs[1], "the CPU and GPU conversions differ"
r = subprocess.run([os.path.join(bindir, "feather-verify"), "--reference", src, os.path.join(work, "gpu", "out.safetensors")],
                   capture_output=True, text=True)
assert r.returncode == 0, r.stdout + r.stderr
print(f"torch {torch.__version__}: {q.numel()} dequantised values equal to torch's; CPU and GPU files identical; "
      + r.stdout.strip().splitlines()[-1])

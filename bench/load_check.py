"""Loads feather outputs with Python's safetensors and torch and checks what they hold.

    python3 bench/load_check.py PACKED.safetensors COMFY.safetensors ORIGINAL.safetensors

The packed file's fp8 weights must be float8_e5m2 [K/16, N, 16] that unpack to the comfy file's
[N, K] bytes; dequantised (q * scale) they must stay close to the original weight.
"""
import json
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file

packed_path, comfy_path, orig_path = sys.argv[1:4]
packed = load_file(packed_path)
comfy = load_file(comfy_path)
orig = load_file(orig_path)
with safe_open(packed_path, "pt") as f:
    meta = f.metadata()
converted = json.loads(meta["feather.tensors"])
assert meta["feather.format"] == "feather-fp8/1", meta["feather.format"]
checked = 0
for name, info in converted.items():
    n, k = info["shape"]
    q = packed[name]
    assert q.dtype == torch.float8_e5m2 and tuple(q.shape) == (k // 16, n, 16), (name, q.dtype, q.shape)
    plain = q.view(torch.uint8).permute(1, 0, 2).reshape(n, k)
    c = comfy[name]
    assert c.dtype == torch.float8_e5m2 and tuple(c.shape) == (n, k)
    assert torch.equal(c.view(torch.uint8), plain), name  # repacked, not requantised
    scale = packed[name + "_scale"].float()
    w = orig[name].float()
    deq = plain.view(torch.float8_e5m2).float() * (scale.reshape(-1, 1) if scale.numel() == n else scale)
    rel = ((deq - w).norm() / w.norm()).item()
    assert rel < 0.08, (name, rel)
    checked += 1
print(f"python safetensors {__import__('safetensors').__version__}, torch {torch.__version__}: "
      f"{len(packed)} + {len(comfy)} tensors loaded, {checked} converted weights unpacked and dequantised "
      f"(relative error < 0.08), comfy layer metadata: {json.loads(meta.get('_quantization_metadata', '{}')) != {}}")
with safe_open(comfy_path, "pt") as f:
    q = json.loads(f.metadata()["_quantization_metadata"])
print(f"comfy file: format_version {q['format_version']}, {len(q['layers'])} layers, first: {next(iter(q['layers'].items()))}")

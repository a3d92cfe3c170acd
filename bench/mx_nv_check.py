"""Checks feather's reading of ComfyUI's MXFP8 and NVFP4 layers, ModelOpt's NVFP4 and
compressed-tensors' NVFP4 and MXFP4, against torch.

    python3 bench/mx_nv_check.py BINDIR WORKDIR

Writes, with torch, a checkpoint as ComfyUI stores these formats: MXFP8 (e4m3 codes, E8M0
scales per 32 values along K) tagged in _quantization_metadata, NVFP4 (two E2M1 codes a byte,
the even column in the high nibble, E4M3 scales per 16 values and one F32 tensor scale) tagged
by a comfy_quant tensor; block scales in cuBLAS's tiled order (tiles of 128 rows x 4 groups,
padded), rows and groups that do not fill a tile included. Beside them, NVFP4 as ModelOpt
writes it, untagged: the even column in the low nibble, block scales [N, K/16] in row order;
and compressed-tensors' X.weight_packed layers: NVFP4 with its block scales divided by a
global scale, MXFP4 with E8M0 bytes [N, K/32]. The tiles are built here with
torch's view and permute, apart from feather's index arithmetic. Layers feather-convert keeps
(--exclude) are dequantised to BF16 and must equal torch's dequantisation, done in float64 and
rounded once to float32 (compressed-tensors': in float32, as it does), to the bit; the converted file must be the same from the CPU and the
GPU, at --scale block:32 and at block:16 (where NVFP4 keeps its own blocks), and
feather-verify --reference must pass on both.
"""
import json
import os
import struct
import subprocess
import sys

import torch

bindir, work = sys.argv[1:3]
os.makedirs(work, exist_ok=True)
gen = torch.Generator().manual_seed(11)
E2M1 = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float64)


def tiled(s):
    """Scales [rows, groups] (uint8) in cuBLAS's tiled order: [rows/128 * 128, groups/4 * 4], padded."""
    r, c = s.shape
    pr, pc = -(-r // 128) * 128, -(-c // 4) * 4
    p = torch.zeros(pr, pc, dtype=torch.uint8)
    p[:r, :c] = s
    t = p.view(pr // 128, 128, pc // 4, 4).permute(0, 2, 1, 3)          # tile (row block, group block)
    t = t.reshape(-1, 4, 32, 4).transpose(1, 2)                         # row r of a tile: (r % 32, r / 32)
    return t.reshape(pr, pc).contiguous()


def mxfp8(n, k):
    w = torch.randn(n, k, generator=gen) * 0.02
    amax = w.view(n, k // 32, 32).abs().amax(-1)
    e = (torch.ceil(torch.log2(amax / 448)).clamp(-127, 127) + 127).to(torch.uint8)
    q = (w.view(n, k // 32, 32) / torch.exp2(e.double() - 127).unsqueeze(-1).float()).view(n, k)
    q = q.clamp(-448, 448).to(torch.float8_e4m3fn)
    want = (q.double().view(n, k // 32, 32) * torch.exp2(e.double() - 127).unsqueeze(-1)).view(n, k)
    return q.view(torch.uint8), tiled(e), want.float()


def nvfp4(n, k, modelopt=False):
    """ComfyUI's NVFP4 (even column in the high nibble, tiled scales), or ModelOpt's (even column
    in the low nibble, scales [n, k/16] in row order, none of them 0)."""
    w = torch.randn(n, k, generator=gen) * 0.02
    g = (w.abs().max() / (448 * 6)).float()
    bs = (w.view(n, k // 16, 16).abs().amax(-1) / 6 / g).clamp(max=448)
    bs[3, 1] = 1 if modelopt else 0  # a block of zeros: ComfyUI's scale is 0, ModelOpt's 1
    bs = bs.to(torch.float8_e4m3fn)
    x = w.view(n, k // 16, 16) / (bs.float() * g).clamp(min=1e-30).unsqueeze(-1)
    codes = (x.view(n, k).double().unsqueeze(-1) - E2M1).abs().argmin(-1).to(torch.uint8)
    codes.view(n, k // 16, 16)[3, 1] = 0
    packed = (codes[:, 1::2] << 4) | codes[:, 0::2] if modelopt else (codes[:, 0::2] << 4) | codes[:, 1::2]
    want = (E2M1[codes.long()].view(n, k // 16, 16) * bs.double().unsqueeze(-1) * g.double()).view(n, k)
    return packed, bs.view(torch.uint8) if modelopt else tiled(bs.view(torch.uint8)), g, want.float()


def ct_fp4(n, k, mx=False):
    """compressed-tensors' NVFP4 (E4M3 scales [n, k/16] divided by a global scale) or MXFP4 (E8M0
    bytes [n, k/32]), the even column in the low nibble; values as compressed-tensors computes
    them: code * (scale / global) in float32, or code * 2^(e - 127)."""
    w = torch.randn(n, k, generator=gen) * 0.02
    gs = 32 if mx else 16
    amax = w.view(n, k // gs, gs).abs().amax(-1)
    if mx:
        e = (torch.floor(torch.log2(amax / 6)) + 127).to(torch.uint8)
        scale = torch.exp2(e.double() - 127).float()
        stored = e
    else:
        g = (448 * 6 / w.abs().max()).float().reshape(1)
        bs = (amax / 6 * g).clamp(max=448).to(torch.float8_e4m3fn)
        bs[2, 3] = 0  # a block of zeros
        scale = bs.float() / g
        stored = bs.view(torch.uint8)
    x = w.view(n, k // gs, gs) / scale.clamp(min=1e-30).unsqueeze(-1)
    codes = (x.view(n, k).double().unsqueeze(-1) - E2M1).abs().argmin(-1).to(torch.uint8)
    if not mx:
        codes.view(n, k // gs, gs)[2, 3] = 0
    packed = (codes[:, 1::2] << 4) | codes[:, 0::2]
    want = (E2M1.float()[codes.long()].view(n, k // gs, gs) * scale.unsqueeze(-1)).view(n, k)
    return packed, stored, None if mx else g, want


def save(path, tensors, meta):
    """A safetensors file from (dtype string, shape, bytes) entries."""
    head, off, blobs = {"__metadata__": meta}, 0, []
    for name, (dt, shape, data) in tensors.items():
        head[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(head).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def raw(t):
    return t.contiguous().view(torch.uint8).numpy().tobytes()


tensors, layers, want = {}, {}, {}
for name, (n, k) in {"blocks.0.attn.qkv": (3072, 3072), "blocks.0.attn.proj": (160, 288)}.items():
    q, e, ref = mxfp8(n, k)
    tensors[name + ".weight"] = ("F8_E4M3", (n, k), raw(q))
    tensors[name + ".weight_scale"] = ("F8_E8M0", tuple(e.shape), raw(e))
    layers[name] = {"format": "mxfp8"}
    want[name + ".weight"] = ref
for name, (n, k) in {"blocks.0.mlp.fc1": (3072, 1024), "blocks.0.mlp.fc2": (144, 288)}.items():
    q, s, g, ref = nvfp4(n, k)
    tag = json.dumps({"format": "nvfp4"}).encode()
    tensors[name + ".weight"] = ("U8", (n, k // 2), raw(q))
    tensors[name + ".weight_scale"] = ("F8_E4M3", tuple(s.shape), raw(s))
    tensors[name + ".weight_scale_2"] = ("F32", (), raw(g.reshape(1)))
    tensors[name + ".comfy_quant"] = ("U8", (len(tag),), tag)
    want[name + ".weight"] = ref
for name, (n, k) in {"blocks.0.mlp.fc3": (1536, 2048), "blocks.0.mlp.fc4": (208, 96)}.items():
    q, s, g, ref = nvfp4(n, k, modelopt=True)  # no tag
    tensors[name + ".weight"] = ("U8", (n, k // 2), raw(q))
    tensors[name + ".weight_scale"] = ("F8_E4M3", tuple(s.shape), raw(s))
    tensors[name + ".weight_scale_2"] = ("F32", (), raw(g.reshape(1)))
    tensors[name + ".input_scale"] = ("F32", (), raw(g.reshape(1)))
    want[name + ".weight"] = ref
for name, (n, k, mx) in {"blocks.0.mlp.fc5": (1024, 3072, False), "blocks.0.mlp.fc6": (112, 160, False),
                         "blocks.0.mlp.fc7": (2048, 1536, True), "blocks.0.mlp.fc8": (96, 224, True)}.items():
    q, s, g, ref = ct_fp4(n, k, mx)  # compressed-tensors' names: written as X.weight
    tensors[name + ".weight_packed"] = ("U8", (n, k // 2), raw(q))
    tensors[name + ".weight_scale"] = ("U8" if mx else "F8_E4M3", tuple(s.shape), raw(s))
    if not mx:
        tensors[name + ".weight_global_scale"] = ("F32", (1,), raw(g))
        tensors[name + ".input_global_scale"] = ("F32", (1,), raw(g))
    want[name + ".weight"] = ref
# one BF16 layer beside them, for the conversion that keeps them all to convert
tensors["blocks.0.norm.linear.weight"] = ("BF16", (64, 64), raw(torch.randn(64, 64, generator=gen).to(torch.bfloat16)))
src = os.path.join(work, "mxnv.safetensors")
save(src, tensors, {"_quantization_metadata": json.dumps({"format_version": "1.0", "layers": layers})})


def convert(*args, cwd=None):
    subprocess.run([os.path.join(bindir, "feather-convert"), "-q", "--force", *args], check=True, cwd=cwd)


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head, data = json.loads(f.read(n)), f.read()
    return head, data


convert("--device", "cpu", "--preset", "none", "--exclude", "attn|mlp", "-o", os.path.join(work, "deq.safetensors"), src)
head, data = load(os.path.join(work, "deq.safetensors"))
values = 0
for name, ref in want.items():
    h = head[name]
    assert h["dtype"] == "BF16" and h["shape"] == list(ref.shape), (name, h)
    a, b = h["data_offsets"]
    got = torch.frombuffer(bytearray(data[a:b]), dtype=torch.int16).view(ref.shape)
    differ = (got != ref.to(torch.bfloat16).view(torch.int16)).sum().item()
    assert differ == 0, f"{name}: {differ} of {ref.numel()} BF16 values differ from torch's"
    values += ref.numel()
lines = []
for scale in ("block:32", "block:16"):
    outs = []
    for dev in ("cpu", "gpu"):
        d = os.path.join(work, dev)
        os.makedirs(d, exist_ok=True)
        convert("--device", dev, "--scale", scale, "-o", "out.safetensors", src, cwd=d)
        with open(os.path.join(d, "out.safetensors"), "rb") as f:
            outs.append(f.read())
    assert outs[0] == outs[1], f"the CPU and GPU conversions differ at --scale {scale}"
    r = subprocess.run([os.path.join(bindir, "feather-verify"), "--reference", src,
                        os.path.join(work, "gpu", "out.safetensors")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    lines.append(f"--scale {scale}: " + r.stdout.strip().splitlines()[-1])
print(f"torch {torch.__version__}: {values} MXFP8, NVFP4 (ComfyUI's, ModelOpt's, compressed-tensors') and MXFP4 "
      "(compressed-tensors') values dequantised equal to torch's; CPU and GPU files identical at block:32 and block:16")
print("\n".join(lines))

"""Times requantising an fp8 checkpoint, builds side by side.

    python3 bench/requant_bench.py WORKDIR BLOCKS REPS BINDIR [BINDIR ...] [-- CONVERT OPTIONS]

Writes WORKDIR/flux.safetensors (Flux-shaped, hidden 3072, BLOCKS double blocks, bf16) with
BINDIR's feather-sample, converts it once to ComfyUI's e4m3fn layout with one scale per tensor
(the fp8 files ComfyUI users download), then converts that file back to packed e5m2 with each
BINDIR's feather-convert in turn, REPS rounds (default options: --device cpu, channel scales),
and prints each run's wall time and peak RSS (wait4), then the median per build. Every build's
output must have the same tensor bytes (the metadata names the command, so whole files differ).
"""
import hashlib
import os
import statistics
import subprocess
import sys
import time

args = sys.argv[1:]
extra = []
if "--" in args:
    extra = args[args.index("--") + 1:]
    args = args[:args.index("--")]
work, blocks, reps, bins = args[0], int(args[1]), int(args[2]), args[3:]
os.makedirs(work, exist_ok=True)
src = os.path.join(work, "flux.safetensors")
e4 = os.path.join(work, "flux-e4m3fn.safetensors")
conv = lambda b: os.path.join(b, "feather-convert")
if not os.path.exists(e4):
    subprocess.run([os.path.join(bins[0], "feather-sample"), "--family", "flux", "--hidden", "3072", "--blocks",
                    str(blocks), "-q", "--force", "-o", src], check=True)
    subprocess.run([conv(bins[0]), "-q", "--force", "--device", "cpu", "--layout", "comfy", "--format", "e4m3fn",
                    "-o", e4, src], check=True)
    os.unlink(src)
opts = extra or ["--device", "cpu"]


def run(b, out):
    t0 = time.perf_counter()
    p = subprocess.Popen([conv(b), "-q", "--force", *opts, "-o", out, e4])
    _, status, ru = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status):
        sys.exit(f"{b}: feather-convert failed")
    return time.perf_counter() - t0, ru.ru_maxrss / 1024


def tensor_digest(path):
    """Of the data section (after the header), which holds every tensor; read in pieces, so that
    this process stays small: a child's peak RSS (wait4) starts from its parent's at the fork."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        f.seek(8 + n)
        for piece in iter(lambda: f.read(1 << 24), b""):
            h.update(piece)
    return h.hexdigest()


res = {b: [] for b in bins}
datas = {}
for r in range(reps):
    for i, b in enumerate(bins):
        out = os.path.join(work, f"out{i}.safetensors")
        s, mb = run(b, out)
        res[b].append((s, mb))
        print(f"round {r + 1} {b}: {s:.2f} s, peak RSS {mb:.0f} MiB", flush=True)
        if r == 0:
            datas[b] = tensor_digest(out)
same = all(d == datas[bins[0]] for d in datas.values())
print(f"e4m3fn input {os.path.getsize(e4) / 1e9:.2f} GB; options {' '.join(opts)}; outputs' tensors "
      f"{'identical' if same else 'DIFFER'}")
for b in bins:
    print(f"{b}: median {statistics.median(s for s, _ in res[b]):.2f} s, "
          f"peak RSS {statistics.median(m for _, m in res[b]):.0f} MiB")
sys.exit(0 if same else 1)

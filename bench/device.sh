#!/bin/sh
# One call on an NVIDIA device machine (no package registry there): build the library with the
# CUDA backend against the Debian packages unpacked by `make device-deps` (.device/root), run
# the whole test suite with the GPU tests for real, then the benchmarks. Logs go to $OUT
# (default ./device-out); a short summary is printed last.
#   [TESTS=0] [BENCH=0] [VERIFY=1] [QUANT=1] [NCU=0] sh bench/device.sh [gemm_bench arguments...]
# BENCH=1 (default): the matrix product against cuBLAS; VERIFY=1: the verifier and Python's
# loading of converted files; QUANT=1: GPU-assisted quantisation and whole conversions, CPU
# against GPU; NCU=1 (default): one profiled skinny launch (NCU_KERNEL, a kernel-name regex,
# and NCU_VARIANT profile another variant). TESTS_FILTER: test-name substrings.
# B=DIR: build directory (default build); PREBUILT=1: use DIR as built elsewhere (same CUDA),
# skipping the build. WMMA=1 (default): also the gfx11 kernels with their WMMA instruction
# emulated (make WMMA_EMULATED=1, in WB, default $B-wmma; prebuilt there with PREBUILT=1) and the
# GPU matrix-product and verification tests on them. Tests and benchmark run under timeouts (a
# hung kernel costs device time).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
ROOT=$PWD/.device/root
LIBDIR=$ROOT/usr/lib/x86_64-linux-gnu
export CPATH="$ROOT/usr/include:$ROOT/usr/include/cjson${CPATH:+:$CPATH}"
export LIBRARY_PATH="$LIBDIR${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$LIBDIR:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
JOBS=$(nproc 2>/dev/null || echo 4)
command -v make >/dev/null 2>&1 || export PATH="$PWD/.device/bin:$PATH"
# the zstd program (the writer tests decompress its output with it) where the image lacks it
command -v zstd >/dev/null 2>&1 || export PATH="$PATH:$ROOT/usr/bin"
# the real test checkpoints that `make device-deps` copied
[ -d .device/testdata ] && export FEATHER_TESTDATA="${FEATHER_TESTDATA:-$PWD/.device/testdata}"

{
    date -u
    nvidia-smi
    nvidia-smi -q -d CLOCK
    command -v make gcc nvcc python3
    nvcc --version
} >"$OUT/env.txt" 2>&1

B=${B:-build}
t0=$(date +%s)
if [ "${PREBUILT:-0}" = 1 ]; then
    echo "prebuilt $B" >"$OUT/build.log"
elif ! make GPU=cuda NO_DEPS=1 BUILD="$B" -j"$JOBS" all "$B/test-runner" "$B/libfeather_kernels.so" \
    "$B/bench/gpu_quant_bench" >"$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log"
    echo "BUILD FAILED (log: build.log)"
    exit 1
fi
t1=$(date +%s)
if command -v cuobjdump >/dev/null 2>&1; then
    cuobjdump --dump-resource-usage "$B/obj/kernels/gemm.o" >"$OUT/resources.txt" 2>&1
    cuobjdump --dump-sass "$B/obj/kernels/gemm.o" >/tmp/gemm.sass 2>&1
    echo "SASS: $(grep -c 'HMMA.16816.F32' /tmp/gemm.sass) HMMA.16816.F32, $(grep -c 'HGMMA' /tmp/gemm.sass) HGMMA, $(grep -c 'PRMT' /tmp/gemm.sass) PRMT, $(grep -c 'LDGSTS' /tmp/gemm.sass) LDGSTS, $(grep -c 'LDL\|STL' /tmp/gemm.sass) local"
fi
if [ "${TESTS:-1}" = 1 ]; then
    FEATHER_BIN=$PWD/$B timeout "${TEST_TIMEOUT:-400}" "$B/test-runner" ${TESTS_FILTER:-} >"$OUT/test.log" 2>&1
    test_rc=$?
else
    test_rc=-1
    : >"$OUT/test.log"
fi
# The AMD kernels, but for their WMMA instruction, on this GPU.
if [ "${WMMA:-1}" = 1 ]; then
    WB=${WB:-$B-wmma}
    if [ "${PREBUILT:-0}" = 1 ] || make GPU=cuda WMMA_EMULATED=1 NO_DEPS=1 BUILD="$WB" -j"$JOBS" "$WB/test-runner" \
        >"$OUT/build-wmma.log" 2>&1; then
        FEATHER_BIN=$PWD/$WB timeout "${TEST_TIMEOUT:-400}" "$WB/test-runner" gemm verify >"$OUT/test-wmma.log" 2>&1
        wmma_rc=$?
    else
        wmma_rc="build failed (build-wmma.log)"
    fi
fi
t2=$(date +%s)
# VERIFY=1: the verification benchmark (CPU and GPU matmul), Python's safetensors loading
# converted outputs (packed, and repacked to the comfy layout), and an fp8 checkpoint with 128 x 128
# block scales and ComfyUI's MXFP8 and NVFP4 layers written by torch, read back against torch's
# dequantisation.
if [ "${VERIFY:-0}" = 1 ]; then
    FEATHER_BIN=$B sh bench/verify_bench.sh /tmp/feather-vbench 2 >"$OUT/verify_bench.txt" 2>&1
    s=/tmp/feather-load
    mkdir -p $s
    "$B/feather-sample" -q --force --family qwen-image --hidden 256 --blocks 2 -o $s/q.safetensors &&
        "$B/feather-convert" -q --force --scale tensor -o $s/p.safetensors $s/q.safetensors &&
        "$B/feather-convert" -q --force --scale tensor --layout comfy -o $s/c.safetensors $s/p.safetensors &&
        python3 bench/load_check.py $s/p.safetensors $s/c.safetensors $s/q.safetensors >"$OUT/load_check.txt" 2>&1
    echo "load check rc $?" >>"$OUT/load_check.txt"
    python3 bench/fp8_blocks_check.py "$B" /tmp/feather-fp8-blocks >>"$OUT/load_check.txt" 2>&1
    echo "fp8 blocks check rc $?" >>"$OUT/load_check.txt"
    python3 bench/mx_nv_check.py "$B" /tmp/feather-mx-nv >>"$OUT/load_check.txt" 2>&1
    echo "MXFP8 and NVFP4 check rc $?" >>"$OUT/load_check.txt"
fi
# QUANT=1: GPU-assisted quantisation, host memory to host memory, then whole conversions from
# the page cache (in /dev/shm when it holds the input and two outputs, else on disk).
if [ "${QUANT:-0}" = 1 ]; then
    timeout 300 "$B/bench/gpu_quant_bench" >"$OUT/quant_bench.txt" 2>&1
    echo "rc $?" >>"$OUT/quant_bench.txt"
    dir=/tmp/feather-gpu-bench
    avail=$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2 {print $4}')
    [ "${avail:-0}" -gt 10000000 ] && dir=/dev/shm/feather-gpu-bench
    FEATHER_BIN=$B timeout 400 sh bench/gpu_convert_bench.sh "$dir" 4 >"$OUT/convert_bench.txt" 2>&1
    echo "rc $?" >>"$OUT/convert_bench.txt"
    rm -rf "$dir"
fi
if [ "${BENCH:-1}" = 1 ]; then
    PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-400}" python3 bench/gemm_bench.py --lib "$B/libfeather_kernels.so" --out "$OUT" "$@" >"$OUT/bench.log" 2>&1
    bench_rc=$?
else
    bench_rc=-1
fi
t3=$(date +%s)
nvidia-smi -q -d CLOCK >"$OUT/clocks_after.txt" 2>&1
# Where the bandwidth-bound kernel spends its time: one profiled launch (M = 1, 8192 × 8192).
if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null 2>&1; then
    timeout 240 ncu --clock-control none --kernel-name regex:"${NCU_KERNEL:-fk_gemm_skinny}" --launch-skip 3 --launch-count 1 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
        python3 bench/gemm_bench.py --lib "$B/libfeather_kernels.so" --out /tmp --ms 1 --shapes 8192x8192 \
        --modes tensor --variants "${NCU_VARIANT:-1}" --reps 3 >"$OUT/ncu.txt" 2>&1
    echo "== ncu (${NCU_KERNEL:-fk_gemm_skinny}, M=1, 8192x8192) =="
    grep -E "DRAM Throughput|Memory Throughput|Duration|Achieved Occupancy|Warp Cycles Per Issued|L2 Hit" "$OUT/ncu.txt" | head -12
fi

echo "== tests (rc $test_rc, $((t2 - t1)) s; build $((t1 - t0)) s) =="
grep -E "^(FAIL|skip)|GPU|worst|cases|identical|DIFFERENT|passed|SKIP|    tests/" "$OUT/test.log" | head -40
if [ "${WMMA:-1}" = 1 ]; then
    echo "== gfx11 kernels, WMMA emulated: gemm and verify tests (rc $wmma_rc) =="
    grep -E "^(FAIL|skip)|GPU|worst|cases|variant runs|passed|SKIP" "$OUT/test-wmma.log" | head -20
fi
if [ "${VERIFY:-0}" = 1 ]; then
    echo "== verification benchmark =="
    cat "$OUT/verify_bench.txt"
    echo "== python load check =="
    cat "$OUT/load_check.txt"
fi
if [ "${QUANT:-0}" = 1 ]; then
    echo "== GPU quantisation benchmark =="
    cat "$OUT/quant_bench.txt"
    echo "== whole conversions, CPU and GPU =="
    cat "$OUT/convert_bench.txt"
fi
if [ "$bench_rc" != -1 ]; then
    echo "== benchmark (rc $bench_rc, $((t3 - t2)) s) =="
    grep -v '^{' "$OUT/bench.log" | tail -45
fi

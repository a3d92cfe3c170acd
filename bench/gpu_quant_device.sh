#!/bin/sh
# One device call for GPU-assisted conversion: (build when build/ holds no runnable programs,)
# the whole test suite with the GPU tests for real, the quantiser's throughput benchmark and the
# whole-converter comparison. Logs go to $OUT (default ./device-out); a summary is printed last.
#   OUT=DIR [TESTS="substrings"] sh bench/gpu_quant_device.sh [gpu_quant_bench arguments]
# Needs the Debian packages unpacked by `make device-deps` (.device/root), like bench/device.sh.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/device-out}
mkdir -p "$OUT"
ROOT=$PWD/.device/root
LIBDIR=$ROOT/usr/lib/x86_64-linux-gnu
export CPATH="$ROOT/usr/include:$ROOT/usr/include/cjson${CPATH:+:$CPATH}"
export LIBRARY_PATH="$LIBDIR${LIBRARY_PATH:+:$LIBRARY_PATH}"
export LD_LIBRARY_PATH="$LIBDIR:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
command -v make >/dev/null 2>&1 || export PATH="$PWD/.device/bin:$PATH"
JOBS=$(nproc 2>/dev/null || echo 4)
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current,clocks.sm,clocks.mem --format=csv
    echo "cores: $JOBS"
    free -g
    df -h /dev/shm /tmp
    head -2 /etc/os-release
} >"$OUT/env.txt" 2>&1
t0=$(date +%s)
if ! build/feather-convert --version >/dev/null 2>&1 || ! build/test-runner gpu_quant_hd_loads >/dev/null 2>&1; then
    echo "building (no runnable programs in build/)"
    if ! make GPU=cuda NO_DEPS=1 -j"$JOBS" CUDA_ARCHS="-gencode arch=compute_90a,code=sm_90a" \
        all build/test-runner build/bench/gpu_quant_bench >"$OUT/build.log" 2>&1; then
        tail -30 "$OUT/build.log"
        echo "BUILD FAILED"
        exit 1
    fi
fi
t1=$(date +%s)
# TESTS: substrings selecting tests (default: the whole suite)
test_rc=0
if [ -z "${TESTS:-}" ]; then
    FEATHER_BIN=$PWD/build timeout 400 build/test-runner >"$OUT/test.log" 2>&1 || test_rc=1
else
    for t in $TESTS; do
        FEATHER_BIN=$PWD/build timeout 400 build/test-runner "$t" >>"$OUT/test.log" 2>&1 || test_rc=1
    done
fi
t2=$(date +%s)
timeout 300 build/bench/gpu_quant_bench "$@" >"$OUT/bench.txt" 2>&1
bench_rc=$?
t3=$(date +%s)
# in memory when /dev/shm has room for the input and two outputs (about 8 GB), else on disk
dir=/tmp/feather-gpu-bench
avail=$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2 {print $4}')
[ "${avail:-0}" -gt 10000000 ] && dir=/dev/shm/feather-gpu-bench
FEATHER_BIN=build timeout 400 sh bench/gpu_convert_bench.sh "$dir" 4 >"$OUT/convert.txt" 2>&1
conv_rc=$?
rm -rf "$dir"
t4=$(date +%s)
echo "== env =="
cat "$OUT/env.txt"
echo "== tests (rc $test_rc, $((t2 - t1)) s; build $((t1 - t0)) s) =="
grep -E "^(FAIL|skip)|GPU|cases|identical|DIFFERENT|passed|SKIP" "$OUT/test.log" | head -40
echo "== quantiser benchmark (rc $bench_rc, $((t3 - t2)) s) =="
cat "$OUT/bench.txt"
echo "== converter (rc $conv_rc, $((t4 - t3)) s) =="
cat "$OUT/convert.txt"

#!/bin/sh
# Compiles every kernel source for the GPUs the project targets and checks the matrix
# instructions are there: AMD gfx1100 (RDNA3) and gfx1151 (RDNA3.5) with clang-19 (no ROCm
# needed, the HIP headers of libamdhip64-dev suffice) must contain v_wmma and v_perm_b32 and
# spill nothing to scratch memory, and the AMD host code must compile; with nvcc present, the
# PTX for sm_80, sm_90 and sm_90a must contain mma.sync m16n8k16 and prmt, and sm_90a's also
# wgmma, and the gfx11 kernels built for sm_80 with WMMA emulated (FK_WMMA_EMULATED, which the
# device machine runs) must hold shuffles and no NVIDIA matrix instruction. The quantiser's
# kernels must keep subnormals and, in PTX, contain no fused float operations. Runs the
# compilers in parallel.
set -u
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CLANG=${CLANG:-clang-19}
NVCC=${NVCC:-}
fail=0
pids=""

if ! command -v "$CLANG" >/dev/null 2>&1; then
    echo "check-gpu-build: $CLANG not found (sh .ci/deps.sh clang-19 lld-19 libamdhip64-dev)" >&2
    exit 1
fi

for arch in gfx1100 gfx1151; do
    for src in kernels/*.hip; do
        out="$tmp/$(basename "$src" .hip)-$arch.s"
        ( "$CLANG" -x hip -std=c++17 --offload-arch=$arch -nogpulib --cuda-device-only -O3 \
              -ffp-contract=off -Wall -Wextra -Werror -S -o "$out" "$src" >"$out.log" 2>&1 \
              || { echo "FAIL $src for $arch:"; cat "$out.log"; exit 1; } ) &
        pids="$pids $!"
    done
done
# The host side of the AMD build (launches, runtime calls, the vendor header's names), which
# nothing else here compiles: checked by the front end alone.
for src in kernels/*.hip; do
    out="$tmp/$(basename "$src" .hip)-host.log"
    ( "$CLANG" -x hip -std=c++17 --offload-arch=gfx1100 -nogpulib --cuda-host-only -O3 -ffp-contract=off \
          -DFK_HIP_ARCHS='"gfx1100 gfx1151"' -Wall -Wextra -Werror -fsyntax-only "$src" >"$out" 2>&1 \
          || { echo "FAIL $src, AMD host code:"; cat "$out"; exit 1; } ) &
    pids="$pids $!"
done
# NVIDIA: PTX for compute_80, compute_90 and compute_90a (the front end, where the sources
# could break); a GPU=cuda build of the library runs ptxas on the same code.
if [ -n "$NVCC" ] && command -v "$NVCC" >/dev/null 2>&1; then
    for sm in 80 90 90a; do
        for src in kernels/*.hip; do
            out="$tmp/$(basename "$src" .hip)-sm$sm.ptx"
            ( "$NVCC" -x cu -std=c++17 -O3 -fmad=false -Werror all-warnings -arch=compute_$sm \
                  -ptx -o "$out" "$src" >"$out.log" 2>&1 \
                  || { echo "FAIL $src for sm_$sm:"; cat "$out.log"; exit 1; } ) &
            pids="$pids $!"
        done
    done
    out="$tmp/gemm-wmma-sm80.ptx"
    ( "$NVCC" -x cu -std=c++17 -O3 -fmad=false -Werror all-warnings -arch=compute_80 -DFK_WMMA_EMULATED \
          -ptx -o "$out" kernels/gemm.hip >"$out.log" 2>&1 \
          || { echo "FAIL kernels/gemm.hip for sm_80, WMMA emulated:"; cat "$out.log"; exit 1; } ) &
    pids="$pids $!"
else
    echo "check-gpu-build: nvcc not found, NVIDIA targets not compiled"
fi
for p in $pids; do wait "$p" || fail=1; done
[ $fail = 0 ] || exit 1

echo "ok   host code for AMD: $(ls kernels/*.hip | wc -l) sources"
for arch in gfx1100 gfx1151; do
    n=$(grep -c 'v_wmma_f32_16x16x16_f16' "$tmp/gemm-$arch.s")
    p=$(grep -c 'v_perm_b32' "$tmp/gemm-$arch.s")
    # a kernel that spills to scratch memory has outgrown the register file
    s=$(grep -c 'ScratchSize: [1-9]' "$tmp/gemm-$arch.s")
    if [ "$n" -eq 0 ] || [ "$p" -eq 0 ] || [ "$s" -ne 0 ]; then
        echo "FAIL gemm for $arch: $n v_wmma_f32_16x16x16_f16, $p v_perm_b32, $s kernels spilling to scratch"; fail=1
    else
        echo "ok   gemm for $arch: $n v_wmma_f32_16x16x16_f16, $p v_perm_b32, no scratch"
    fi
done
if [ -f "$tmp/gemm-sm90.ptx" ]; then
    for sm in 80 90 90a; do
        n=$(grep -c 'mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32' "$tmp/gemm-sm$sm.ptx")
        p=$(grep -c 'prmt.b32' "$tmp/gemm-sm$sm.ptx")
        w=$(grep -c 'wgmma.mma_async' "$tmp/gemm-sm$sm.ptx")
        if [ "$n" -eq 0 ] || [ "$p" -eq 0 ] || { [ $sm = 90a ] && [ "$w" -eq 0 ]; }; then
            echo "FAIL gemm for sm_$sm: $n mma.sync m16n8k16, $w wgmma, $p prmt"; fail=1
        else
            echo "ok   gemm for sm_$sm: $n mma.sync m16n8k16, $w wgmma, $p prmt"
        fi
    done
    n=$(grep -c 'shfl.sync' "$tmp/gemm-wmma-sm80.ptx")
    m=$(grep -c -E '\b(wg)?mma\.' "$tmp/gemm-wmma-sm80.ptx")
    if [ "$n" -eq 0 ] || [ "$m" -ne 0 ]; then
        echo "FAIL gemm for sm_80, WMMA emulated: $n shfl.sync, $m matrix instructions"; fail=1
    else
        echo "ok   gemm for sm_80, WMMA emulated: $n shfl.sync, no matrix instruction"
    fi
fi
# The quantiser must give the CPU's bits: no fused multiply-adds and no flushed subnormals in
# its kernels (the arithmetic's own rules, kernels/quant_hd.h). AMD: every kernel keeps f32
# subnormals (denorm mode 3); its correctly rounded divisions expand to FMAs internally, so
# contraction is checked on the NVIDIA side, where PTX shows the source's operations.
for arch in gfx1100 gfx1151; do
    k=$(grep -c '^[[:space:]]*\.amdhsa_kernel ' "$tmp/quant-$arch.s")
    d=$(grep -c 'amdhsa_float_denorm_mode_32 3' "$tmp/quant-$arch.s")
    if [ "$k" -eq 0 ] || [ "$k" -ne "$d" ]; then
        echo "FAIL quant for $arch: $d of $k kernels keep f32 subnormals"; fail=1
    else
        echo "ok   quant for $arch: $k kernels, all keep f32 subnormals"
    fi
done
if [ -f "$tmp/quant-sm90.ptx" ]; then
    for sm in 80 90 90a; do
        f=$(grep -c -E '(fma|mad)\.rn[a-z.]*\.f(32|64)|mad\.f32|\.ftz' "$tmp/quant-sm$sm.ptx")
        v=$(grep -c 'div\.rn\.f32' "$tmp/quant-sm$sm.ptx")
        if [ "$f" -ne 0 ] || [ "$v" -eq 0 ]; then
            echo "FAIL quant for sm_$sm: $f fused or flushing float instructions, $v div.rn.f32"; fail=1
        else
            echo "ok   quant for sm_$sm: no fused or flushing float instructions, $v div.rn.f32"
        fi
    done
fi
exit $fail

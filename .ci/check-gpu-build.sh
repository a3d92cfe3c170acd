#!/bin/sh
# Compiles every kernel source for the GPUs the project targets and checks the matrix
# instructions are there: AMD gfx1100 (RDNA3) and gfx1151 (RDNA3.5) with clang-19 (no ROCm
# needed, the HIP headers of libamdhip64-dev suffice) must contain v_wmma and v_perm_b32 and
# spill nothing to scratch memory, and the AMD host code must compile; with nvcc present, the
# PTX for sm_80, sm_90 and sm_90a must contain mma.sync m16n8k16 and prmt, and sm_90a's also
# wgmma, and the gfx11 kernels built for sm_80 with WMMA emulated (FK_WMMA_EMULATED, which the
# device machine runs) must hold shuffles and no NVIDIA matrix instruction. The quantiser's
# kernels must keep subnormals and, in PTX, contain no fused float operations. The skinny
# matrix-product forms must keep the blocks per multiprocessor pinned for sm_90a in
# .ci/skinny-occupancy.txt (ptxas; with the CUDA release named there) and spill nothing. Runs the
# compilers in parallel.
set -u
cd "$(dirname "$0")/.." || exit 1
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
                  || { echo "FAIL $src for sm_$sm:"; cat "$out.log"; exit 1; }
              # the registers of sm_90a's kernels, for the skinny forms' check below
              if [ $sm = 90a ] && [ "$src" = kernels/gemm.hip ]; then
                  "$(dirname "$(command -v "$NVCC")")/ptxas" -arch=sm_90a -v -o "$tmp/gemm-sm90a.cubin" "$out" \
                      >"$tmp/ptxas.log" 2>&1 || { echo "FAIL ptxas for sm_90a:"; cat "$tmp/ptxas.log"; exit 1; }
              fi ) &
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
    # The skinny forms' blocks per multiprocessor, which their registers set: the pick's rules
    # (kernels/gemm_skinny.h) were measured with those counts, and an unrelated edit can move a
    # form across a register boundary (4 blocks to 5, say) and change its speed by a fifth. So
    # they are pinned, per release of CUDA, in .ci/skinny-occupancy.txt, and no form may spill.
    # A change there means: measure the forms again, then update the file from this output.
    want=$(sed -n 's/^# CUDA release //p' .ci/skinny-occupancy.txt)
    rel=$("$NVCC" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
    if [ "$rel" != "$want" ]; then
        echo "skip skinny forms' occupancy: pinned for CUDA $want, this nvcc is $rel"
    else
        # "blocks spill-bytes name" per skinny kernel; blocks: what 64 K registers (256 per
        # warp at a time) and 64 warps per multiprocessor allow
        awk '/Compiling entry function/ { split($0, q, "\047"); name = q[2] }
             /bytes spill stores/ { spill = $5 }
             /Used [0-9]+ registers/ && name ~ /fk_gemm_skinny/ { print $5, spill, name; name = "" }' \
            "$tmp/ptxas.log" | while read -r regs spill name; do
            form=$(echo "$name" | c++filt | sed 's/^void //; s/(FkParams)$//')
            w=$(echo "$form" | sed 's/^fk_gemm_skinny<MmaNv<[0-9]*>, [0-9]*, [0-9]*, \([0-9]*\),.*/\1/')
            per_warp=$(( (regs * 32 + 255) / 256 * 256 ))
            blocks=$(( 65536 / (w * per_warp) ))
            [ $blocks -le $((64 / w)) ] || blocks=$((64 / w))
            echo "$blocks $spill $form"
        done | sort -k3 >"$tmp/occ.now"
        grep -v '^#' .ci/skinny-occupancy.txt | sort -k3 >"$tmp/occ.want"
        k=$(wc -l <"$tmp/occ.now")
        s=$(awk '$2 != 0' "$tmp/occ.now" | wc -l)
        if [ "$k" -eq 0 ] || [ "$s" -ne 0 ] || ! cmp -s "$tmp/occ.now" "$tmp/occ.want"; then
            echo "FAIL skinny forms for sm_90a: $s of $k spill; blocks per multiprocessor and spilled bytes, pinned (<) and now (>), .ci/skinny-occupancy.txt:"
            diff "$tmp/occ.want" "$tmp/occ.now" | sed -n 's/^[<>] /  &/p'; fail=1
        else
            echo "ok   skinny forms for sm_90a: $k kernels, blocks per multiprocessor as pinned, no spills"
        fi
    fi
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

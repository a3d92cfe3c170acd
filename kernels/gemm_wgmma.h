/*
 * NVIDIA Hopper (sm_90a) kernel for large M: wgmma, with the roles swapped so that the fp8
 * weight is the register operand. A warpgroup computes a 64 × BNA tile of Yᵀ = W · Aᵀ: its
 * operand A is 64 weight rows × 16 k, built in registers from the packed records (bytes → high
 * bytes of fp16, as everywhere), its operand B is BNA activation rows × 16 k read by the tensor
 * cores from shared memory (K-major, 128-byte swizzle). Two warpgroups share each activation
 * tile; tiles arrive through the same multi-stage cp.async pipeline as the tiled kernel.
 * Block scales (G a multiple of 64) go to a second accumulator set, written (scale-d = 0) by
 * the group's first instruction and added with fma at its end; tensor/channel scales, bias and
 * rounding are the shared epilogue. Compiled only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL); the
 * host uses it only on compute capability 9.0.
 */
#ifndef FK_GEMM_WGMMA_H
#define FK_GEMM_WGMMA_H

#include "gemm_common.h"

#define FK_WG_THREADS 256
#define FK_WG_BN 128 /* weight rows per block: two warpgroups of 64 */

template <int BNA>
struct FkWgTile {
    static constexpr int ACT_BYTES = BNA * 128;        /* BNA rows × 64 halves */
    static constexpr int W_BYTES = 4 * FK_WG_BN * 16;  /* 4 kb × 128 records */
    static constexpr int STAGE_BYTES = ACT_BYTES + W_BYTES; /* a multiple of 1024 */
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void fk_wgmma_m64n64k16_acc(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc)
                 : "memory");
}
__device__ __forceinline__ void fk_wgmma_m64n64k16_set(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, 0, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc)
                 : "memory");
}

__device__ __forceinline__ void fk_wgmma_m64n128k16_acc(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, 1, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc)
                 : "memory");
}
__device__ __forceinline__ void fk_wgmma_m64n128k16_set(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, 0, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc)
                 : "memory");
}

__device__ __forceinline__ void fk_wgmma_m64n256k16_acc(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
                 "{%128, %129, %130, %131}, %132, 1, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                   "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                   "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc)
                 : "memory");
}
__device__ __forceinline__ void fk_wgmma_m64n256k16_set(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
                 "{%128, %129, %130, %131}, %132, 0, 1, 1, 0;\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
                   "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
                   "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc)
                 : "memory");
}

__device__ __forceinline__ void fk_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void fk_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void fk_wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fk_wgmma_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
/* cp.async wrote the tiles through the generic proxy; the tensor cores read them through the
 * async proxy. */
__device__ __forceinline__ void fk_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* Shared-memory matrix descriptor: K-major rows of 128 bytes, 128-byte swizzle, 8-row groups
 * 1024 bytes apart (stride byte offset); the leading byte offset is unused in this mode. */
__device__ __forceinline__ uint64_t fk_wg_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3ffffu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

template <int BNA>
__device__ __forceinline__ void fk_wg_mma(float *d, const uint32_t *a, uint64_t desc, bool overwrite) {
    if constexpr (BNA == 256) {
        if (overwrite) fk_wgmma_m64n256k16_set(d, a[0], a[1], a[2], a[3], desc);
        else fk_wgmma_m64n256k16_acc(d, a[0], a[1], a[2], a[3], desc);
    } else if constexpr (BNA == 128) {
        if (overwrite) fk_wgmma_m64n128k16_set(d, a[0], a[1], a[2], a[3], desc);
        else fk_wgmma_m64n128k16_acc(d, a[0], a[1], a[2], a[3], desc);
    } else {
        if (overwrite) fk_wgmma_m64n64k16_set(d, a[0], a[1], a[2], a[3], desc);
        else fk_wgmma_m64n64k16_acc(d, a[0], a[1], a[2], a[3], desc);
    }
}

/* Stage kc: activation rows [m0, m0+BNA) × k [64kc, 64kc+64) swizzled, weight records of
 * columns [n0, n0+128) for the 4 kb of the chunk; zeros past M, N, K. */
template <int BNA>
__device__ __forceinline__ void fk_wg_load(const FkParams &p, unsigned char *stage, int m0, int n0, int kc) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int it = 0; it < BNA * 8 / FK_WG_THREADS; it++) {
        int i = tid + it * FK_WG_THREADS, r = i >> 3, c = i & 7;
        int row = m0 + r, k = kc * 64 + c * 8;
        bool v = row < p.M && k < p.K;
        fk_copy16(stage + fk_sw128_offset(r, c), v ? p.A + (size_t)row * p.K + k : p.A, v);
    }
#pragma unroll
    for (int it = 0; it < 4 * FK_WG_BN / FK_WG_THREADS; it++) {
        int i = tid + it * FK_WG_THREADS, kb = i / FK_WG_BN, n = i % FK_WG_BN;
        int gkb = kc * 4 + kb, col = n0 + n;
        bool v = gkb * 16 < p.K && col < p.N;
        fk_copy16(stage + FkWgTile<BNA>::ACT_BYTES + kb * FK_WG_BN * 16 + n * 16,
                  v ? p.Q + ((size_t)gkb * p.N + col) * 16 : p.Q, v);
    }
}
#endif

template <int BNA, int STAGES, bool BLOCK>
__global__ void __launch_bounds__(FK_WG_THREADS) fk_gemm_wgmma(FkParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    typedef FkWgTile<BNA> Tile;
    constexpr int NACC = BNA / 2;
    extern __shared__ uint4 fk_smem_wg[];
    /* swizzled tiles need 1024-byte alignment: the launch adds 1 KB of slack */
    const uint32_t s_raw = (uint32_t)__cvta_generic_to_shared(fk_smem_wg);
    const uint32_t s_base = (s_raw + 1023u) & ~1023u;
    unsigned char *g_base = (unsigned char *)fk_smem_wg + (s_base - s_raw);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int t = lane & 3;
    const int n0 = blockIdx.x * FK_WG_BN, m0 = blockIdx.y * BNA;
    const int nrow = 16 * warp + (lane >> 2); /* weight row (of 128) of a0/a2; a1/a3: +8 */
    const int nchunks = (p.K + 63) / 64;
    const uint32_t sel = fk_wg_a_sel(t);

    float acc[NACC];
    float accg[BLOCK ? NACC : 1];
#pragma unroll
    for (int i = 0; i < NACC; i++) acc[i] = 0.0f;

    /* Pipeline. With block scales, chunk c's instructions are issued while chunk c-1's still
     * run (wgmma.wait_group 1): a stage is refilled two iterations after its chunk was issued
     * (copies run STAGES-2 chunks ahead), and the register operand alternates between two sets.
     * Without block scales ptxas serializes that arrangement (C7513) and it measured slower
     * than simply waiting for each chunk's instructions (wait_group 0, copies STAGES-1 chunks
     * ahead; four warpgroups per multiprocessor keep the tensor cores fed in between). */
    constexpr bool OVERLAP = BLOCK;
    constexpr int AHEAD = OVERLAP ? STAGES - 2 : STAGES - 1;
#pragma unroll
    for (int s = 0; s < AHEAD; s++) {
        if (s < nchunks) fk_wg_load<BNA>(p, g_base + s * Tile::STAGE_BYTES, m0, n0, s);
        fk_copy_commit();
    }
    uint32_t a0[4][4], a1[4][4];
    auto step = [&](int c, uint32_t(&a)[4][4]) {
        fk_copy_wait<AHEAD - 1>();
        fk_fence_proxy_async();
        __syncthreads(); /* chunk c has landed; the stage refilled next is no longer read */
        {
            int nc = c + AHEAD;
            if (nc < nchunks) fk_wg_load<BNA>(p, g_base + (nc % STAGES) * Tile::STAGE_BYTES, m0, n0, nc);
            fk_copy_commit();
        }
        const int st = c % STAGES;
        const unsigned char *wst = g_base + st * Tile::STAGE_BYTES + Tile::ACT_BYTES;
        const uint32_t act = s_base + st * Tile::STAGE_BYTES;
        /* the register operand: 4 k16 steps of weight rows nrow, nrow+8 */
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const unsigned char *rec = wst + s * FK_WG_BN * 16 + nrow * 16;
#pragma unroll
            for (int r = 0; r < 4; r++) {
                uint32_t w = *(const uint32_t *)(rec + fk_wg_a_row8(r) * 8 * 16 + 4 * fk_wg_a_word(t, r));
                a[s][r] = __byte_perm(w, 0u, sel);
            }
        }
        fk_wgmma_fence();
        const bool start = BLOCK && (c * 64) % p.G == 0;
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const uint64_t desc = fk_wg_desc(act + s * 32); /* 16 k = 32 bytes further in each row */
            if constexpr (BLOCK) fk_wg_mma<BNA>(accg, a[s], desc, start && s == 0);
            else fk_wg_mma<BNA>(acc, a[s], desc, false);
        }
        fk_wgmma_commit();
        if constexpr (BLOCK) {
            if (((c + 1) * 64) % p.G == 0) {
                fk_wgmma_wait0();
                float s0 = fk_block_scale(p, n0 + nrow, c * 64), s8 = fk_block_scale(p, n0 + nrow + 8, c * 64);
#pragma unroll
                for (int i = 0; i < NACC; i++) acc[i] = fmaf(accg[i], fk_wg_d_row8(i) ? s8 : s0, acc[i]);
                return;
            }
        }
        if constexpr (OVERLAP) fk_wgmma_wait1();
        else fk_wgmma_wait0();
    };
    if constexpr (OVERLAP) {
        for (int c = 0; c < nchunks; c += 2) {
            step(c, a0);
            if (c + 1 < nchunks) step(c + 1, a1);
        }
    } else {
        for (int c = 0; c < nchunks; c++) step(c, a0);
    }
    fk_wgmma_wait0();
    /* epilogue: accumulator i holds Yᵀ[nrow + 8·row8][col], i.e. Y[m0 + col][n0 + nrow + …] */
#pragma unroll
    for (int i = 0; i < NACC; i++) {
        int n = n0 + nrow + 8 * fk_wg_d_row8(i), m = m0 + fk_wg_d_col(lane, i);
        if (m < p.M && n < p.N) fk_store1(p, m, n, acc[i]);
    }
#else
    (void)p;
#endif
}

#endif

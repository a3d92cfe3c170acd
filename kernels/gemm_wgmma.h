/*
 * NVIDIA Hopper (sm_90a) kernels for M > 32: wgmma, with the roles swapped so that the fp8
 * weight is the register operand. A warpgroup computes a 64 × BNA tile of Yᵀ = W · Aᵀ: its
 * operand A is 64 weight rows × 16 k, built in registers from the packed records (bytes → high
 * bytes of fp16, as everywhere), its operand B is BNA activation rows × 16 k read by the tensor
 * cores from shared memory (K-major, 128-byte swizzle). Block scales (G a multiple of 64) go to
 * a second accumulator set, written (scale-d = 0) by the group's first instruction and added
 * with fma at its end, or are kept in units of the current group (below); tensor/channel
 * scales, bias and rounding are the shared epilogue. Compiled only for sm_90a
 * (__CUDA_ARCH_FEAT_SM90_ALL); the host uses them only on compute capability 9.0, and the
 * tiled mma.sync kernels where no tensor map can be made. (A first version, whose threads all
 * issued cp.async copies with a block barrier per chunk, was slower than these at every
 * benchmarked point, 1.1–1.25× with block scales when the pick last chose between them and
 * 1.9–2.5× in the last comparison, and was removed; BENCHMARKS.md has the figures.)
 */
#ifndef FK_GEMM_WGMMA_H
#define FK_GEMM_WGMMA_H

#include "gemm_common.h"
#include <cuda.h> /* CUtensorMap (the type only: the encoder is reached through the runtime) */

#define FK_WG_BN 128 /* weight rows of the two-warpgroup tiles */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* wgmma m64nNk16, f16 × f16 → f32, A from registers, B from shared memory (descriptor), with
 * scale-d as a run-time value (0: D = A·B, 1: D += A·B) turned into the instruction's predicate:
 * no branch between two instructions, so the warp-specialised kernels keep every wgmma on one
 * straight path. */
__device__ __forceinline__ void fk_wgmma_m64n64k16_p(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(scale_d)
                 : "memory");
}
__device__ __forceinline__ void fk_wgmma_m64n128k16_p(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                 "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(scale_d)
                 : "memory");
}
/* 256 rows of A: 128 accumulators per thread (FK_VARIANT_WS256, SK256) */
__device__ __forceinline__ void fk_wgmma_m64n256k16_p(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
                 "{%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
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
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(scale_d)
                 : "memory");
}
template <int BNA>
__device__ __forceinline__ void fk_wg_mma_p(float *d, const uint32_t *a, uint64_t desc, int scale_d) {
    static_assert(BNA == 64 || BNA == 128 || BNA == 256, "tiles of 64, 128 or 256 rows of A");
    if constexpr (BNA == 256) fk_wgmma_m64n256k16_p(d, a[0], a[1], a[2], a[3], desc, scale_d);
    else if constexpr (BNA == 128) fk_wgmma_m64n128k16_p(d, a[0], a[1], a[2], a[3], desc, scale_d);
    else fk_wgmma_m64n64k16_p(d, a[0], a[1], a[2], a[3], desc, scale_d);
}

__device__ __forceinline__ void fk_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void fk_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void fk_wgmma_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fk_wgmma_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
/* Shared-memory matrix descriptor: K-major rows of 128 bytes, 128-byte swizzle, 8-row groups
 * 1024 bytes apart (stride byte offset); the leading byte offset is unused in this mode. */
__device__ __forceinline__ uint64_t fk_wg_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3ffffu) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}

#endif

/* ---- Warp-specialised and persistent ----
 * One producer warp moves each stage with two bulk tensor copies (TMA: the activation tile
 * swizzled exactly as the descriptor expects, the weight records as they lie; zeros past M, N,
 * K) completing on a "full" mbarrier; two or three consumer warpgroups wait on it, build the register
 * operand of chunk c+1 while chunk c's instructions run (wgmma.wait_group 1, the register operand
 * alternating between two sets), and give each stage back on an "empty" mbarrier once the
 * instructions that read it are complete. No block-wide barrier in the main loop. The grid is
 * one block per multiprocessor looping over output tiles (grouped by 8 tiles of A rows so that
 * the blocks running together share their activation and weight panels in L2); the producer
 * runs ahead into the next tile while the consumers store the last one, and the epilogue reads
 * each thread's two columns' scale and bias once (per element, it had cost 10 % at M = 4096).
 * Three consumer warpgroups (192 weight rows) measured 1.06–1.12× two at full waves on an H100:
 * more warps to cover each other's operand builds and waits, and 1.5× the work per activation
 * tile moved. Tiles of 256 rows of A (m64n256, two consumer warpgroups) had measured 1.3–1.5×
 * slower while a ninth producer warp left the consumers 168 registers for their 128
 * accumulators; with a producer warpgroup giving its registers away (232 each) they are the
 * fastest form wherever their waves are full (H100: 1.04–1.23× the three-warpgroup tiles at
 * M = 4096, and 2× the work per weight byte moved). Measured and dropped: a third
 * register-operand set keeping two chunks queued (3–8 % slower), stream-K over the
 * three-warpgroup tiles (as fast as or slower than whole tiles at every benchmarked shape; its
 * 160 registers also spilled a little), and three warpgroups over 64 rows of A, whose 96
 * accumulators per thread would have held two group-sum sets beside the total (1.35–1.7×
 * slower than 128 rows even with tensor scales). */
#define FK_WS_GROUP_M 8

#define FK_WS_LDE 72 /* halves per row of the epilogue's buffer (64 + 8) */

/* A block of NWG consumer warpgroups (64 weight rows each) and a producer. A warp's registers
 * come from one quarter of the register file (16384), so with two consumer warpgroups and a
 * ninth producer warp one quarter holds three warps of at most 168 registers: enough without
 * block scales, too few with them (two accumulator sets of 64, two register-operand sets of 16
 * and the addresses; compiled to 224 such a block never launched). Twelve consumer warps and a
 * thirteenth would leave one quarter four warps of at most 128. So with block scales, with
 * three consumer warpgroups and with 256 rows of A, the producer is a whole warpgroup that gives
 * its registers to the consumers (setmaxnreg). The registers a consumer may take are those the
 * producer gives back, no more: the block is allocated ENTRY_REGS per thread (its launch
 * bound's share of the register file) and a setmaxnreg.inc beyond the pool waits forever (a
 * first build asking 240 of 168 + 136 · 128 / 256 hung). 192 weight rows (384 words of 8 bytes
 * per kb) come in two copies of 96, which land one after the other: TMA boxes are at most 256
 * words wide. */
template <int BNA, int STAGES, int NWG, bool BLOCK = false>
struct FkWsTile {
    static constexpr int WBN = 64 * NWG;               /* weight rows per tile */
    static constexpr int CONSUMERS = 128 * NWG;
    static constexpr bool PRODUCER_WG = NWG == 3 || BLOCK || BNA == 256;
    static constexpr int THREADS = CONSUMERS + (PRODUCER_WG ? 128 : 32);
    static constexpr int ENTRY_REGS = (65536 / THREADS) & ~7, PRODUCER_REGS = 32;
    static constexpr int CONSUMER_REGS = (ENTRY_REGS + (ENTRY_REGS - PRODUCER_REGS) * 128 / CONSUMERS) & ~7;
    static constexpr int WCOPIES = WBN > 128 ? 2 : 1;
    static constexpr int HROWS = WBN / WCOPIES;        /* weight rows per copy */
    static constexpr int ACT_BYTES = BNA * 128;
    static constexpr int W_BYTES = 4 * WBN * 16;
    static constexpr int STAGE_BYTES = ACT_BYTES + W_BYTES; /* a multiple of 1024 */
    static constexpr int EPI_BYTES = NWG * 64 * FK_WS_LDE * 2;
    /* stages, then 2·STAGES mbarriers, the epilogue's buffer, plus 1 KB to align the swizzled
     * tiles */
    static constexpr int EPI_OFFSET = STAGES * STAGE_BYTES + 16 * STAGES;
    static constexpr size_t SMEM = (size_t)EPI_OFFSET + EPI_BYTES + 1024;
    static_assert(NWG == 2 || NWG == 3, "two or three consumer warpgroups");
};

/* Epilogue of the warp-specialised kernels: a 64·NWG × BNA tile of Yᵀ, thread t of consumer warp
 * w holding weight rows 16w + t/4 (+8) of it (fk_wg_d_*). Each warpgroup rounds its 64 weight
 * rows × 64 rows of A at a time into a padded shared buffer (rows of A, 72 halves: the 2-byte
 * writes of a warp land on distinct banks) and stores it as 16-byte pieces of rows of Y: stored
 * straight from the accumulators, every 2-byte store filled half of each sector it touched and
 * the tensor cores waited the epilogue out. Per element the arithmetic is the same
 * (fk_finish_col, fk_round); a Y not 16-byte aligned is stored from the buffer in 2-byte
 * pieces. */

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* Barrier of consumer warpgroup wg (ids 2–4; 0 is the block's, 1 the consumer warpgroups'). */
__device__ __forceinline__ void fk_wg_sync(int wg) {
    /* immediate ids: a register id makes ptxas reserve all 16 barriers */
    if (wg == 2) asm volatile("bar.sync 4, 128;\n" ::: "memory");
    else if (wg) asm volatile("bar.sync 3, 128;\n" ::: "memory");
    else asm volatile("bar.sync 2, 128;\n" ::: "memory");
}

template <int BNA>
__device__ __forceinline__ void fk_ws_epilogue(const FkParams &p, const float *acc, int m0, int n0, int warp, int lane,
                                               uint16_t *epi) {
    constexpr int NACC = BNA / 2;
    const int nrow = 16 * warp + (lane >> 2), nA = n0 + nrow, nB = nA + 8;
    const FkCol cA = nA < p.N ? fk_col(p, nA) : FkCol{0.0f, 0.0f};
    const FkCol cB = nB < p.N ? fk_col(p, nB) : FkCol{0.0f, 0.0f};
    /* 64-row tiles (M = 64–128) keep the per-element stores: there the staged ones measured
     * (one run) up to 11 % slower at M = 64 and no faster at M = 128 */
    if constexpr (BNA == 64) {
#pragma unroll
        for (int i = 0; i < NACC; i++) {
            const bool hi = fk_wg_d_row8(i);
            int n = hi ? nB : nA, m = m0 + fk_wg_d_col(lane, i);
            if (m < p.M && n < p.N) p.Y[(size_t)m * p.N + n] = fk_round(p, fk_finish_col(p, hi ? cB : cA, acc[i]));
        }
        return;
    }
    const int wg = warp >> 2, tw = threadIdx.x & 127, nl = nrow - 64 * wg;
    uint16_t *e = epi + wg * 64 * FK_WS_LDE;
    /* A Y not 16-byte aligned is copied out of the buffer two bytes at a time. (It had taken
     * the per-element stores, unrolled over every accumulator: that code more than doubled the
     * kernels, 61 → 135 KB of SASS for 192 × 128 tiles with block scales, and a lone call, its
     * code no longer in L2, took 4–5 µs longer: H100, N = 3072, K = 128, M = 1024, 15.0 against
     * 10.1 µs.) */
    const bool aligned = (uintptr_t)p.Y % 16 == 0;
#pragma unroll
    for (int h = 0; h < BNA / 64; h++) {
        fk_wg_sync(wg); /* the buffer's last reads (previous pass or tile) are done */
#pragma unroll
        for (int j = 0; j < 32; j++) {
            const int i = 32 * h + j;
            const bool hi = fk_wg_d_row8(i);
            e[(fk_wg_d_col(lane, i) - 64 * h) * FK_WS_LDE + nl + 8 * hi] = fk_round(p, fk_finish_col(p, hi ? cB : cA, acc[i]));
        }
        fk_wg_sync(wg);
        /* 64 rows of A × 64 weight rows: 8 pieces of 16 bytes per row (N % 8 == 0: a piece lies
         * wholly inside or wholly past N) */
#pragma unroll
        for (int q = tw; q < 64 * 8; q += 128) {
            const int r = q >> 3, c = q & 7, m = m0 + 64 * h + r, n = n0 + 64 * wg + 8 * c;
            if (m < p.M && n < p.N) {
                const uint16_t *src = e + r * FK_WS_LDE + 8 * c;
                uint16_t *dst = p.Y + (size_t)m * p.N + n;
                if (aligned) *(uint4 *)dst = *(const uint4 *)src;
                else
#pragma unroll 1
                    for (int x = 0; x < 8; x++) dst[x] = src[x];
            }
        }
    }
}
#endif

/* Tile t of the grouped order: tm (rows of A, BNA each), tn (weight rows, 64·NWG each). */
__host__ __device__ __forceinline__ void fk_ws_tile(int t, int ntm, int ntn, int &tm, int &tn) {
    const int per_group = FK_WS_GROUP_M * ntn, g = t / per_group, first = g * FK_WS_GROUP_M;
    const int gsize = ntm - first < FK_WS_GROUP_M ? ntm - first : FK_WS_GROUP_M;
    const int r = t - g * per_group;
    tm = first + r % gsize;
    tn = r / gsize;
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void fk_mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void fk_mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void fk_mbar_arrive(uint32_t bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(bar) : "memory");
}
/* Until the phase of the given parity has completed. */
__device__ __forceinline__ void fk_mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
__device__ __forceinline__ void fk_tma_2d(uint32_t dst, const CUtensorMap *map, int c0, int c1, uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n"
                 ::"r"(dst), "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(bar)
                 : "memory");
}
#endif

/* ---- The last waves split between blocks (stream-K, sm_90a: fk_gemm_wgsk) ----
 * With N = 3072, M = 1024 there are 192 tiles of 128 × 128 for 132 multiprocessors: a second
 * wave 45 % full, and ws128 reached 0.57–0.61 of cuBLAS there. Here tiles below `dp` (the whole
 * waves but the last one) are dealt out whole as before, and the chunks of the remaining tiles
 * (between one and two waves of them) are divided evenly over the blocks, each block taking a
 * contiguous run. A run starts inside a tile and ends inside another: the block holding chunk 0
 * of a tile (its run's last segment) adds the partial sums of the blocks holding the tile's
 * other chunks (each one's first split segment), always in increasing block order, then stores
 * the tile through the same epilogue; the sum is the same whatever the timing. Partial sums go
 * to the workspace after the counters, one 128 × BNA f32 slot per block, each thread's
 * accumulators as float4 where the same thread of the adding block reads them, and are
 * published by a release store of the block's counter, which the adding block waits for with
 * acquire loads and sets back to zero. No block waits for one of lower index and every block
 * publishes before it waits, so resident blocks (one per multiprocessor, never more blocks than
 * multiprocessors) cannot deadlock.
 * Registers: a block of 9 warps fits only at 168 per thread or fewer (a warp's registers come
 * from one of the 4 quarters of the register file, 16384 each: 3 warps in a quarter allow 170).
 * Builds above that made the occupancy query answer 0, and a silent fallback to another kernel
 * was all that was ever timed; hence the bound below (no spills), and a variant asked for by
 * number fails with the reason instead of falling back (fk_gemm). Measured on an H100: 1.12×
 * ws128 at 3072×12288, M = 1024, slower at the other benchmarked shapes (fk_pick_hopper says
 * where it is used).
 * With block scales (fk_gemm_wgsk_block) the producer is a warpgroup, as in fk_gemm_wgws, and
 * a run may begin or end inside a group: it starts its group sums from zero and adds what it
 * has of the last group after its last chunk (ptxas: 12 bytes of spill at 128 rows of A). */
#define FK_SK_MAXNREG 168

/* Which work block b of `grid` does: whole tiles b, b + grid, … below dp, then chunks
 * [start(b), start(b + 1)) of the (ntiles − dp) · nchunks chunks of the tiles from dp on. */
struct FkSkWork {
    int ntiles, nchunks, dp, grid; /* (ntiles − dp) · nchunks < 2^31 (the host sees to it) */
    __host__ __device__ int start(int b) const {
        return (int)((long long)b * ((ntiles - dp) * nchunks) / grid);
    }
};

/* Walks a block's work as segments (tile, chunks [c0, c1)) of one tile each. */
struct FkSkIter {
    int t, l, hi;
    __device__ void init(const FkSkWork &w, int b) {
        t = b;
        l = w.start(b);
        hi = w.start(b + 1);
    }
    __device__ bool next(const FkSkWork &w, int &tile, int &c0, int &c1) {
        if (t < w.dp) {
            tile = t;
            c0 = 0;
            c1 = w.nchunks;
            t += w.grid;
            return true;
        }
        if (l >= hi) return false;
        tile = w.dp + l / w.nchunks;
        c0 = l % w.nchunks;
        int e = l - c0 + w.nchunks;
        if (e > hi) e = hi;
        c1 = c0 + (e - l);
        l = e;
        return true;
    }
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void fk_flag_wait(const unsigned *f) {
    for (;;) {
        unsigned v;
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(f) : "memory");
        if (v) return;
        __nanosleep(64);
    }
}
__device__ __forceinline__ void fk_flag_set(unsigned *f) {
    asm volatile("st.release.gpu.global.u32 [%0], %1;\n" ::"l"(f), "r"(1u) : "memory");
}
/* The consumer warpgroups only (the producer does not take part). */
template <int NWG>
__device__ __forceinline__ void fk_consumers_sync() { asm volatile("bar.sync 1, %0;\n" ::"n"(128 * NWG) : "memory"); }
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* The body of the warp-specialised kernels: the blocks walk their work w as segments (a tile
 * and a run of its chunks; without SPLIT whole tiles b, b + grid, …); the producer warp moves
 * every chunk of them, the consumers compute each segment and, with SPLIT, publish or add the
 * partial sums of split tiles before the tile's epilogue. */
template <int BNA, int STAGES, int NWG, bool BLOCK, bool SPLIT, bool RESCALE>
__device__ __forceinline__ void fk_ws_body(const CUtensorMap *tm_act, const CUtensorMap *tm_w, const FkParams &p,
                                           const FkSkWork &w) {
    typedef FkWsTile<BNA, STAGES, NWG, BLOCK> Tile;
    constexpr int NACC = BNA / 2, WBN = Tile::WBN, HROWS = Tile::HROWS;
    extern __shared__ uint4 fk_smem_ws[];
    const uint32_t s_raw = (uint32_t)__cvta_generic_to_shared(fk_smem_ws);
    const uint32_t s_base = (s_raw + 1023u) & ~1023u;
    const unsigned char *g_base = (const unsigned char *)fk_smem_ws + (s_base - s_raw);
    uint16_t *epi = (uint16_t *)((unsigned char *)fk_smem_ws + (s_base - s_raw) + Tile::EPI_OFFSET);
    const uint32_t bar_full = s_base + STAGES * Tile::STAGE_BYTES, bar_empty = bar_full + 8 * STAGES;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int ntn = (p.N + WBN - 1) / WBN, ntm = (p.M + BNA - 1) / BNA;
    const int nchunks = w.nchunks;

    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            fk_mbar_init(bar_full + 8 * s, 1);  /* the producer's arrival (+ the copies' bytes) */
            fk_mbar_init(bar_empty + 8 * s, 4 * NWG); /* one arrival per consumer warp */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    /* back to back (fk_launch_dependent): the launch and the set-up above overlap the end of the
     * kernel before; nothing is read or written before it is complete. The next kernel may
     * then start its own blocks wherever this one's have finished. */
    fk_grid_wait();
    fk_grid_release();

    int tile, c0, c1, tm, tn;
    FkSkIter it;
    it.init(w, blockIdx.x);
    if (warp >= 4 * NWG) {
        if constexpr (Tile::PRODUCER_WG) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(Tile::PRODUCER_REGS));
        /* producer: one lane issues every copy */
        if (warp == 4 * NWG && lane == 0) {
            int s = 0;
            uint32_t ph = 0;
            while (it.next(w, tile, c0, c1)) {
                fk_ws_tile(tile, ntm, ntn, tm, tn);
                for (int c = c0; c < c1; c++) {
                    fk_mbar_wait(bar_empty + 8 * s, ph ^ 1); /* the first pass finds the stages free */
                    fk_mbar_expect_tx(bar_full + 8 * s, Tile::STAGE_BYTES);
                    const uint32_t dst = s_base + s * Tile::STAGE_BYTES;
                    fk_tma_2d(dst, tm_act, c * 64, tm * BNA, bar_full + 8 * s);
#pragma unroll
                    for (int h = 0; h < Tile::WCOPIES; h++)
                        fk_tma_2d(dst + Tile::ACT_BYTES + h * 4 * HROWS * 16, tm_w, (tn * WBN + h * HROWS) * 2, c * 4,
                                  bar_full + 8 * s);
                    if (++s == STAGES) {
                        s = 0;
                        ph ^= 1;
                    }
                }
            }
        }
        return;
    }

    /* consumers */
    if constexpr (Tile::PRODUCER_WG) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Tile::CONSUMER_REGS));
    const int t = lane & 3;
    const int nrow = 16 * warp + (lane >> 2); /* weight row (of WBN) of a0/a2; a1/a3: +8 */
    /* its records in a stage's weight copy (rows nrow and nrow + 8 lie in the same one) */
    const int wrec = (nrow / HROWS) * 4 * HROWS * 16 + (nrow % HROWS) * 16;
    const uint32_t sel = fk_wg_a_sel(t);
    float acc[NACC];
    /* Block scales with three consumer warpgroups or 256 rows of A, whose registers do not hold
     * a second accumulator set: one set, in units of the current group's scale. As a group
     * closes it is multiplied by r = s_g / s_{g+1}, the next group adds to it, and the last
     * group's scale multiplies it at the end. The same sum as acc += s_g · Σ_g, rounded
     * differently. The host allows it only where every scale is a normal float within
     * [2^-126, 2^126] (the range of the fast division below) and they are within 2^40 of each
     * other (FK_SCALE_BLOCK_RS): in those units the sum then stays below
     * 2^40 · K · 65504 · 57344 < 2^103, inside f32's range. */
    constexpr bool RS = BLOCK && (NWG == 3 || BNA == 256);
    static_assert(!RS || RESCALE, "one set only for scales in units of the current group");
    /* RS2: the same units with two sets, where registers hold them (RESCALE: the host's check
     * passed). Even chunks go to acc and odd ones to accg, each set in units of the scale of its
     * last chunk's group: before a set takes a chunk of a later group it is multiplied by the
     * ratio of the two scales, right after the wait that follows the other set's chunk (its own
     * last chunk is then complete), so no close waits for the tensor cores. ptxas allows that
     * read only of a set whose instructions were issued earlier in the same loop pass (else it
     * serialises every wgmma, C7514), so the loop runs passes of 8 chunks that end with a full
     * wait: one drain per 8 chunks where the exact close below drains at every group. H100 back
     * to back, block:128 M = 1024 / 4096, against that close: ws128 3072×12288 201.3 / 685.3 →
     * 174.1 / 589.6 µs, 8192² 301.3 / 1250.5 → 258.0 / 1049.2; sk128 3072×12288 166.5 / 734.0
     * → 147.1 / 636.4, 12288×3072 186.3 / 761.7 → 158.4 / 625.5; block:64 up to 1.36×. */
    constexpr bool RS2 = BLOCK && RESCALE && !RS;
    struct Units {
        float u0, u8; /* the scales of rows nrow and nrow + 8 of the set's group */
        int g;        /* that group */
    };
    float accg[BLOCK && !RS ? NACC : 1];
    uint32_t a0[4][4], a1[4][4];
    int s = 0, rs = 0; /* stage of the next chunk; stage of the oldest one not yet given back */
    uint32_t ph = 0;
    /* chunks issued and not yet given back: at most 2 where give_back is called, since each step
     * issues one chunk and then waits for all but at most one (a loop here compiled to 20
     * instructions per chunk, a tenth of the consumers' instructions) */
    int pending = 0;
    auto give_back = [&](int keep) {
#pragma unroll
        for (int i = 0; i < 2; i++)
            if (pending > keep) {
                if (lane == 0) fk_mbar_arrive(bar_empty + 8 * rs);
                rs = rs + 1 == STAGES ? 0 : rs + 1;
                pending--;
            }
    };
    while (it.next(w, tile, c0, c1)) {
        fk_ws_tile(tile, ntm, ntn, tm, tn);
        const int n0 = tn * WBN, m0 = tm * BNA;
#pragma unroll
        for (int i = 0; i < NACC; i++) acc[i] = 0.0f;
        if constexpr (RS2)
#pragma unroll
            for (int i = 0; i < NACC; i++) accg[i] = 0.0f;
        /* block scales: the chunk's place in its group, counted rather than worked out with two
         * remainders by G per chunk (H100, 8192², M = 4096: 476 → 416 M instructions executed;
         * ws128 1.09–1.21× and ws64 1.04–1.07× faster. The same counter in the skinny and tiled
         * kernels measured up to 1.2× slower, so they keep the remainders.) */
        const int cpg = BLOCK ? p.G / 64 : 1;
        int gc = BLOCK ? c0 % cpg : 0;
        /* Block scales of rows nrow and nrow + 8 (gs0, gs8), the next group's loaded as a group
         * closes, a group ahead of their use, from the two rows' addresses and the group's index
         * (gi), counted. Each load had worked out its address with a division by G (as
         * fk_block_scale does): 59 % more instructions executed than with tensor scales
         * (Nsight Compute, 8192², M = 4096, ws128); without the divisions ws128 and ws64 were
         * 1.1–1.4× faster (H100, block:64 and block:128, M = 64…4096). Loaded as the group
         * closes instead of a group ahead: equal with block:128, up to 1.1× slower with block:64
         * (a load per chunk), 1.1× faster with block:256 (one call, noisy). */
        const bool v0 = n0 + nrow < p.N, v8 = n0 + nrow + 8 < p.N;
        const float *const sp0 = p.S + (v0 ? (size_t)(n0 + nrow) * p.gpr : 0);
        const float *const sp8 = p.S + (v8 ? (size_t)(n0 + nrow + 8) * p.gpr : 0);
        int gi = BLOCK ? c0 / cpg : 0;
        float gs0 = 0.0f, gs8 = 0.0f;
        auto load_scales = [&] {
            gs0 = v0 ? __ldg(sp0 + gi) : 0.0f;
            gs8 = v8 ? __ldg(sp8 + gi) : 0.0f;
        };
        if constexpr (BLOCK && !RS && !RS2) load_scales();
        /* RS: the scales of the next two groups (ns: gi + 1, nns: gi + 2) and the ratio r of this
         * group's close. A close does only its wait and the multiplications: the next ratio and
         * load follow the next chunk's instructions (adv), off the path from the wait to them.
         * With the division and load at the close, it took 1.25× the time of the same kernel
         * without closes (H100, 3072², M = 1024), the multiplications alone 1.07×.
         * The loads are unconditional, from the row's last group past its end and from row 0
         * past N: a load chosen against a constant had its result copied at once, which waited
         * out the load's whole latency at every group (1.00–1.07× slower, H100). What they read
         * there is harmless: a scale past the last group only ever enters a ratio that no close
         * uses, and rows past N have zero weights (the rule keeps every scale finite). */
        float ns0 = 1.0f, ns8 = 1.0f, nns0 = 1.0f, nns8 = 1.0f, r0 = 1.0f, r8 = 1.0f;
        bool adv = false;
        auto load_ahead = [&](int g, float &x0, float &x8) {
            const int last = g < p.gpr ? g : p.gpr - 1;
            x0 = __ldg(sp0 + last);
            x8 = __ldg(sp8 + last);
        };
        /* RS, RS2: on to the next group's scales, and those of the group after the next sent for */
        auto next_group = [&] {
            gs0 = ns0;
            gs8 = ns8;
            ns0 = nns0;
            ns8 = nns8;
            gi++;
            load_ahead(gi + 2, nns0, nns8);
        };
        if constexpr (RS || RS2) {
            load_ahead(gi, gs0, gs8);
            load_ahead(gi + 1, ns0, ns8);
            load_ahead(gi + 2, nns0, nns8);
        }
        if constexpr (RS) {
            r0 = __fdividef(gs0, ns0);
            r8 = __fdividef(gs8, ns8);
        }
        /* RS2: acc's and accg's units, both the first group's at the start */
        Units ua = {gs0, gs8, gi}, ub = ua;
        if constexpr (BLOCK && SPLIT && !RS && !RS2) {
            /* a split tile's run may begin inside a group: its first chunk adds to zeros */
            if (gc != 0)
#pragma unroll
                for (int i = 0; i < NACC; i++) accg[i] = 0.0f;
        }
        /* a: the chunk's register operand; RS2: its set, the other set and that one's units, and
         * whether the step ends its pass */
        auto step = [&](int c, uint32_t(&a)[4][4], auto &cur, auto &oth, Units &uo, bool drain) {
            [[maybe_unused]] bool opens = false, closes = false;
            if constexpr (BLOCK) {
                opens = gc == 0;
                closes = gc == cpg - 1;
                gc = closes ? 0 : gc + 1;
            }
            fk_mbar_wait(bar_full + 8 * s, ph);
            const unsigned char *wst = g_base + s * Tile::STAGE_BYTES + Tile::ACT_BYTES;
            const uint32_t act = s_base + s * Tile::STAGE_BYTES;
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const unsigned char *rec = wst + k * HROWS * 16 + wrec;
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    uint32_t wd = *(const uint32_t *)(rec + fk_wg_a_row8(r) * 8 * 16 + 4 * fk_wg_a_word(t, r));
                    a[k][r] = __byte_perm(wd, 0u, sel);
                }
            }
            fk_wgmma_fence();
            /* block scales: the group's first instruction overwrites accg */
            [[maybe_unused]] const int keep = BLOCK && !RS2 && opens ? 0 : 1;
            /* k16 step k starts 32 bytes further: 2 in the descriptor's address field, whose low
             * 6 bits are zero at the stage's 1024-byte aligned start, so no carry */
            const uint64_t desc0 = fk_wg_desc(act);
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const uint64_t desc = desc0 + 2 * k;
                if constexpr (RS2) fk_wg_mma_p<BNA>(cur, a[k], desc, 1);
                else if constexpr (BLOCK && !RS) fk_wg_mma_p<BNA>(accg, a[k], desc, k == 0 ? keep : 1);
                else fk_wg_mma_p<BNA>(acc, a[k], desc, 1);
            }
            fk_wgmma_commit();
            pending++;
            if (++s == STAGES) {
                s = 0;
                ph ^= 1;
            }
            if constexpr (RS) {
                if (adv) {
                    adv = false;
                    next_group();
                    r0 = __fdividef(gs0, ns0);
                    r8 = __fdividef(gs8, ns8);
                }
            }
            if constexpr (RS2) {
                if (drain) fk_wgmma_wait0();
                else fk_wgmma_wait1();
                /* the other set to the next chunk's units; a select, not a branch (with a branch
                 * ptxas waited for the tensor cores before it) */
                const int gn = gi + (closes ? 1 : 0);
                const float t0 = closes ? ns0 : gs0, t8 = closes ? ns8 : gs8;
                const bool later = uo.g != gn;
                const float q0 = later ? __fdividef(uo.u0, t0) : 1.0f, q8 = later ? __fdividef(uo.u8, t8) : 1.0f;
#pragma unroll
                for (int i = 0; i < NACC; i++) oth[i] *= fk_wg_d_row8(i) ? q8 : q0;
                uo = {t0, t8, gn};
                give_back(drain ? 0 : 1);
                if (closes) next_group();
                return;
            }
            if constexpr (BLOCK) {
                /* RS: the run's last group is scaled after the loop */
                if (closes && (!RS || c + 1 < c1)) {
                    fk_wgmma_wait0();
                    give_back(0);
                    if constexpr (RS) {
#pragma unroll
                        for (int i = 0; i < NACC; i++) acc[i] *= fk_wg_d_row8(i) ? r8 : r0;
                        adv = true;
                    } else {
#pragma unroll
                        for (int i = 0; i < NACC; i++) acc[i] = fmaf(accg[i], fk_wg_d_row8(i) ? gs8 : gs0, acc[i]);
                        if (c + 1 < c1) {
                            gi++;
                            load_scales();
                        }
                    }
                    return;
                }
            }
            fk_wgmma_wait1(); /* the previous chunk's instructions are complete */
            give_back(1);
        };
        /* Pairs of chunks, then an odd last one: no path reaches a redefinition of a set whose
         * instructions may still run (ptxas would serialize every wgmma, C7513). RS2: passes of
         * 8 chunks, then pairs, each ending with a full wait. */
        int c = c0;
        if constexpr (RS2) {
            for (; c + 7 < c1; c += 8)
#pragma unroll
                for (int j = 0; j < 8; j += 2) {
                    step(c + j, a0, acc, accg, ub, false);
                    step(c + j + 1, a1, accg, acc, ua, j == 6);
                }
            for (; c + 1 < c1; c += 2) {
                step(c, a0, acc, accg, ub, false);
                step(c + 1, a1, accg, acc, ua, true);
            }
            if (c < c1) step(c, a0, acc, accg, ub, true);
        } else {
            for (; c + 1 < c1; c += 2) {
                step(c, a0, acc, accg, ub, false);
                step(c + 1, a1, accg, acc, ua, false);
            }
            if (c < c1) step(c, a0, acc, accg, ub, false);
        }
        fk_wgmma_wait0();
        give_back(0);
        if constexpr (RS) {
#pragma unroll
            for (int i = 0; i < NACC; i++) acc[i] *= fk_wg_d_row8(i) ? gs8 : gs0;
        }
        if constexpr (RS2)
#pragma unroll
            for (int i = 0; i < NACC; i++)
                acc[i] = fk_wg_d_row8(i) ? fmaf(acc[i], ua.u8, accg[i] * ub.u8) : fmaf(acc[i], ua.u0, accg[i] * ub.u0);
        if constexpr (BLOCK && SPLIT && !RS && !RS2) {
            /* a split tile's run may end inside a group: add what it has of it */
            if (gc != 0)
#pragma unroll
                for (int i = 0; i < NACC; i++) acc[i] = fmaf(accg[i], fk_wg_d_row8(i) ? gs8 : gs0, acc[i]);
        }
        if constexpr (SPLIT) {
            if (c0 > 0) {
                /* the tile's first chunks are another block's: publish these partial sums. As
                 * in fk_split_last, the consumers' barrier orders every thread's stores before
                 * the one release store; a fence in every consumer thread before it was 14 % of
                 * the stall samples at 3072², M = 64 (sk64, Nsight Compute), 256 fences
                 * where the release needs none. */
                float4 *slot = (float4 *)p.part + (size_t)blockIdx.x * (NACC / 4) * Tile::CONSUMERS + tid;
#pragma unroll
                for (int q = 0; q < NACC / 4; q++)
                    slot[q * Tile::CONSUMERS] = make_float4(acc[4 * q], acc[4 * q + 1], acc[4 * q + 2], acc[4 * q + 3]);
                fk_consumers_sync<NWG>();
                if (tid == 0) fk_flag_set(p.count + blockIdx.x);
                continue;
            }
            if (c1 < nchunks) {
                /* the rest of the tile is the following blocks' first segments: add them in order */
                const int tend = (tile - w.dp + 1) * nchunks;
                for (int j = blockIdx.x + 1; j < w.grid && w.start(j) < tend; j++) {
                    if (w.start(j + 1) == w.start(j)) continue; /* no chunks: no partial sums */
                    fk_flag_wait(p.count + j);
                    const float4 *src = (const float4 *)p.part + (size_t)j * (NACC / 4) * Tile::CONSUMERS + tid;
#pragma unroll
                    for (int q = 0; q < NACC / 4; q++) {
                        const float4 v = __ldcg(src + q * Tile::CONSUMERS);
                        acc[4 * q] += v.x;
                        acc[4 * q + 1] += v.y;
                        acc[4 * q + 2] += v.z;
                        acc[4 * q + 3] += v.w;
                    }
                }
                fk_consumers_sync<NWG>(); /* every thread has seen the flags: set them back to zero */
                if (tid == 0)
                    for (int j = blockIdx.x + 1; j < w.grid && w.start(j) < tend; j++) p.count[j] = 0;
            }
        }
        fk_ws_epilogue<BNA>(p, acc, m0, n0, warp, lane, epi);
    }
}

/* Whole tiles only: block b computes tiles b, b + grid, … */
template <int BNA, int STAGES, int NWG, bool BLOCK, bool RESCALE>
__device__ __forceinline__ void fk_ws_whole(const CUtensorMap *tm_act, const CUtensorMap *tm_w, const FkParams &p) {
    constexpr int WBN = FkWsTile<BNA, STAGES, NWG>::WBN;
    const int ntiles = ((p.N + WBN - 1) / WBN) * ((p.M + BNA - 1) / BNA);
    const FkSkWork w = {ntiles, (p.K + 63) / 64, ntiles, (int)gridDim.x};
    fk_ws_body<BNA, STAGES, NWG, BLOCK, false, RESCALE>(tm_act, tm_w, p, w);
}
#endif

/* One block per multiprocessor: the launch bound tells ptxas the registers at entry, without
 * which it ignores setmaxnreg. RESCALE: block scales that passed the host's check
 * (FK_SCALE_BLOCK_RS), summed in units of the current group (RS2 in fk_ws_body). */
template <int BNA, int STAGES, bool BLOCK, bool RESCALE>
__global__ void __launch_bounds__(FkWsTile<BNA, STAGES, 2, BLOCK>::THREADS, 1)
    fk_gemm_wgws(const __grid_constant__ CUtensorMap tm_act, const __grid_constant__ CUtensorMap tm_w, FkParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    fk_ws_whole<BNA, STAGES, 2, BLOCK, RESCALE>(&tm_act, &tm_w, p);
#else
    (void)tm_act;
    (void)tm_w;
    (void)p;
#endif
}

/* The stream-K kernels' body, compiled for sm_90a only. */
template <int BNA, int STAGES, bool BLOCK, bool RESCALE>
__device__ __forceinline__ void fk_wgsk_run(const CUtensorMap &tm_act, const CUtensorMap &tm_w, const FkParams &p,
                                            const FkSkWork &w) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    fk_ws_body<BNA, STAGES, 2, BLOCK, true, RESCALE>(&tm_act, &tm_w, p, w);
#else
    (void)tm_act;
    (void)tm_w;
    (void)p;
    (void)w;
#endif
}

template <int BNA, int STAGES>
__global__ void __maxnreg__(FK_SK_MAXNREG)
    fk_gemm_wgsk(const __grid_constant__ CUtensorMap tm_act, const __grid_constant__ CUtensorMap tm_w, FkParams p,
                 FkSkWork w) {
    fk_wgsk_run<BNA, STAGES, false, false>(tm_act, tm_w, p, w);
}

/* The same with block scales: a producer warpgroup, hence a launch bound like fk_gemm_wgws's. */
template <int BNA, int STAGES, bool RESCALE>
__global__ void __launch_bounds__(FkWsTile<BNA, STAGES, 2, true>::THREADS, 1)
    fk_gemm_wgsk_block(const __grid_constant__ CUtensorMap tm_act, const __grid_constant__ CUtensorMap tm_w,
                       FkParams p, FkSkWork w) {
    fk_wgsk_run<BNA, STAGES, true, RESCALE>(tm_act, tm_w, p, w);
}

/* Three consumer warpgroups: 192 × BNA tiles, whole ones. Block scales only in units of the
 * current group (RS in fk_ws_body): a second accumulator set does not fit 160 registers. */
template <int BNA, int STAGES, bool BLOCK>
__global__ void __launch_bounds__(FkWsTile<BNA, STAGES, 3, BLOCK>::THREADS, 1)
    fk_gemm_wgws3(const __grid_constant__ CUtensorMap tm_act, const __grid_constant__ CUtensorMap tm_w, FkParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    fk_ws_whole<BNA, STAGES, 3, BLOCK, BLOCK>(&tm_act, &tm_w, p);
#else
    (void)tm_act;
    (void)tm_w;
    (void)p;
#endif
}

#endif

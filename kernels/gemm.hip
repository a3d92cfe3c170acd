/*
 * Y = A · (S ⊙ Q)ᵀ (+ bias) with A fp16 and Q the (K/16, N, 16) e5m2 weight; f32 sums.
 *
 * Two kernels, both written once over a vendor fragment layer (Mma = MmaNv<P> or MmaAmd):
 *   skinny  M ≤ 16·MI rows (gemm_skinny.h). Weight-bandwidth bound: each lane loads its B fragment
 *           straight from global memory into registers (the weight never passes through shared
 *           memory), next super-step's loads in flight while the current one computes; the W warps
 *           of a block split K and add their sums through shared memory. Where a wave of one block
 *           per column tile would leave the GPU idle, several blocks split a tile's K too, and the
 *           last block of a tile to finish adds their partial sums in a fixed order (deterministic)
 *           and writes the output; where the tiles make one wave of one block per multiprocessor,
 *           blocks of 7–24 warps avoid that serial tail. On Hopper, launches back to back overlap:
 *           each block warms L2 with its first weight bytes while the previous kernel finishes
 *           (programmatic dependent launch, vendor.h).
 *   tiled   BM×BN output tiles, K in chunks of 64 through a multi-stage shared-memory pipeline
 *           (cp.async on sm_80+); each warp owns a (16·MI)×(TN·NJ) sub-tile.
 * Block scales: the fragments of one super-step always lie in one K-group; its sums go to a
 * second accumulator that is scaled and added (fma) at the group's end, or (the tiled kernels
 * above M = 128 and some skinny forms, where the caller passed FK_SCALE_BLOCK_RS) to the one
 * set, kept in units of the current group's scale and multiplied by s_g / s_{g+1} as a group
 * ends. Tensor/channel scales,
 * bias and rounding happen in the epilogue (gemm_common.h).
 */
#include "gemm_common.h"
#include <type_traits> /* std::integral_constant (fk_static_for) */
#if FK_FRAG_NV
#include "mma_nv.h"
#include "gemm_wgmma.h"
#include "pick_hd.h"
#else
#include "mma_amd.h"
#endif

#define FK_SKINNY_WARM 2 /* super-steps per warp prefetched before the previous kernel ends */

/* Block scales of the group a warp is summing, for the NJ·TN columns of its accumulators. They
 * are loaded when the group opens, so that the round trip to L2 overlaps the group's work:
 * loaded at its end, after the last product, every group cost each warp a dependent load (the
 * skinny kernel then issued its next weight loads that much later). Each lane keeps the scales
 * of columns lane, lane + 32, ... and the flush fetches the ones its accumulators need from the
 * lane that holds them (a shuffle): held as the accumulators' columns (two per tile and lane on
 * NVIDIA, repeated in every row of lanes), they took 2·NJ registers per lane instead of
 * ⌈NJ·TN / 32⌉, and as many loads per group. */
template <class Mma, int NJ>
struct FkGroupScales {
    static constexpr int COLS = NJ * Mma::TN, SPL = (COLS + 31) / 32;
    static_assert(32 % Mma::TN == 0, "a tile's columns lie in one register of the lanes");
    /* whether register i of this lane holds a column of the tile (column lane + 32i) */
    static __device__ __forceinline__ bool holds(int lane, int i) { return COLS % 32 == 0 || lane + 32 * i < COLS; }
    float s[SPL];
};
template <class Mma, int NJ>
__device__ __forceinline__ void fk_group_scales(FkGroupScales<Mma, NJ> &g, const FkParams &p, int col0, int k, int lane) {
    typedef FkGroupScales<Mma, NJ> G;
#pragma unroll
    for (int i = 0; i < G::SPL; i++)
        g.s[i] = G::holds(lane, i) ? fk_block_scale(p, col0 + lane + 32 * i, k) : 0.0f;
}

/* Accumulator tiles of NJ fragments: one per fragment, or with the operands swapped (SWAP in
 * fk_gemm_skinny) one per two. */
template <int NJ, bool SWAP>
struct FkAccTiles {
    static constexpr int N = SWAP ? (NJ + 1) / 2 : NJ;
};

/* The values of g (per column, held as group scales are) for the columns of this lane's
 * accumulators of tile t: accumulator i takes s[fk_acc_sc<Mma, SWAP>(i)]. Swapped, tile t holds
 * fragments 2t (accumulators 0, 1) and 2t + 1 (2, 3), in the lane's column g of each. Called by
 * whole warps. */
template <class Mma, int NJ, bool SWAP = false>
__device__ __forceinline__ void fk_frag_cols(const FkGroupScales<Mma, NJ> &g, int t, int lane, float (&s)[Mma::NSC]) {
    if constexpr (SWAP) {
        static_assert(Mma::NSC >= 2, "two fragments per swapped tile");
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int nj = 2 * t + h < NJ ? 2 * t + h : 0;
            const float v = fk_shfl(g.s[fk_gsc_reg(nj, Mma::TN)], fk_gsc_lane(nj, Mma::TN, Mma::acc_row(lane, 0)));
            s[h] = 2 * t + h < NJ ? v : 0.0f;
        }
    } else {
#pragma unroll
        for (int j = 0; j < Mma::NSC; j++)
            s[j] = fk_shfl(g.s[fk_gsc_reg(t, Mma::TN)], fk_gsc_lane(t, Mma::TN, Mma::acc_col(lane, j)));
    }
}
template <class Mma, bool SWAP>
__device__ __forceinline__ int fk_acc_sc(int i) { return SWAP ? fk_swap_c_frag(i) : Mma::sc_of(i); }

/* acc += accg · s (per column, the group's scales g); accg = 0. Called by whole warps. */
template <class Mma, int MI, int NJ>
__device__ __forceinline__ void fk_flush(float (&acc)[MI][NJ][Mma::NACC], float (&accg)[MI][NJ][Mma::NACC],
                                         const FkGroupScales<Mma, NJ> &g, int lane) {
#pragma unroll
    for (int nj = 0; nj < NJ; nj++) {
        float s[Mma::NSC];
        fk_frag_cols<Mma, NJ>(g, nj, lane, s);
#pragma unroll
        for (int i = 0; i < Mma::NACC; i++) {
#pragma unroll
            for (int mi = 0; mi < MI; mi++) {
                acc[mi][nj][i] = fmaf(accg[mi][nj][i], s[Mma::sc_of(i)], acc[mi][nj][i]);
                accg[mi][nj][i] = 0.0f;
            }
        }
    }
}

/* acc ·= f (per column, f held as group scales are). Called by whole warps. */
template <class Mma, int MI, int NJ, bool SWAP = false, int NT = FkAccTiles<NJ, SWAP>::N>
__device__ __forceinline__ void fk_scale_cols(float (&acc)[MI][NT][Mma::NACC], const FkGroupScales<Mma, NJ> &f, int lane) {
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float s[Mma::NSC];
        fk_frag_cols<Mma, NJ, SWAP>(f, t, lane, s);
#pragma unroll
        for (int i = 0; i < Mma::NACC; i++)
#pragma unroll
            for (int mi = 0; mi < MI; mi++) acc[mi][t][i] *= s[fk_acc_sc<Mma, SWAP>(i)];
    }
}

/* A group's close in units of the current group's scale (FK_SCALE_BLOCK_RS): acc ·= s_g / s_{g+1}
 * per column (cur, nxt: the two groups' scales). */
template <class Mma, int MI, int NJ, bool SWAP = false, int NT = FkAccTiles<NJ, SWAP>::N>
__device__ __forceinline__ void fk_next_units(float (&acc)[MI][NT][Mma::NACC], const FkGroupScales<Mma, NJ> &cur,
                                              const FkGroupScales<Mma, NJ> &nxt, int lane) {
    FkGroupScales<Mma, NJ> r;
#pragma unroll
    for (int i = 0; i < FkGroupScales<Mma, NJ>::SPL; i++) r.s[i] = __fdividef(cur.s[i], nxt.s[i]);
    fk_scale_cols<Mma, MI, NJ, SWAP>(acc, r, lane);
}

template <class Mma, int MI, int NJ>
__device__ __forceinline__ void fk_zero(float (&acc)[MI][NJ][Mma::NACC]) {
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int nj = 0; nj < NJ; nj++)
#pragma unroll
            for (int i = 0; i < Mma::NACC; i++) acc[mi][nj][i] = 0.0f;
}

/* f(integral_constant<int, 0>), …, f(integral_constant<int, N - 1>), unrolled by the compiler
 * for certain */
template <int I, int N>
struct FkStaticFor {
    template <class F>
    static __device__ __forceinline__ void run(F &f) {
        f(std::integral_constant<int, I>{});
        FkStaticFor<I + 1, N>::run(f);
    }
};
template <int N>
struct FkStaticFor<N, N> {
    template <class F>
    static __device__ __forceinline__ void run(F &) {}
};
template <int N, class F>
__device__ __forceinline__ void fk_static_for(F f) { FkStaticFor<0, N>::run(f); }

/* One fragment's accumulators, by value, and their store: called, not inlined, so that the
 * epilogue stays small enough to unroll (inlined, its MI·NJ copies of the rounding and scaling
 * code took the compiler 5× as long) */
template <class Mma>
struct FkFrag {
    float v[Mma::NACC];
};
template <class Mma>
__device__ __noinline__ void fk_store_frag(FkParams p, FkFrag<Mma> f, int row0, int col0, int lane) {
    Mma::store(p, f.v, row0, col0, lane);
}

/* ------------------------------------------------------------------------------------------ */
template <class Mma, int WARPS_M, int WARPS_N, int MI, int NJ, int STAGES, int MINB, bool BLOCK, bool RS = false>
__global__ void __launch_bounds__(WARPS_M *WARPS_N * 32, MINB) fk_gemm_tiled(FkParams p) {
    constexpr int NTHREADS = WARPS_M * WARPS_N * 32;
    constexpr int WM = MI * 16, WN = NJ * Mma::TN;
    constexpr int BM = WARPS_M * WM, BN = WARPS_N * WN;
    constexpr int LDB = FK_LDB(BN);
    typedef FkTile<BM, BN> Tile;
    extern __shared__ uint4 fk_smem_tiled[];
    unsigned char *smem = (unsigned char *)fk_smem_tiled;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
    /* split K (blockIdx.z): this block's chunks [c_lo, c_hi) */
    const int nchunks = (p.K + FK_KC - 1) / FK_KC;
    const int c_lo = (int)((long long)blockIdx.z * nchunks / p.splits);
    const int c_hi = (int)((long long)(blockIdx.z + 1) * nchunks / p.splits);

    float acc[MI][NJ][Mma::NACC];
    float accg[MI][NJ][Mma::NACC];
    FkGroupScales<Mma, NJ> gsc, gnx; /* RS: gnx, the next group's */
    fk_zero<Mma, MI, NJ>(acc);
    if constexpr (BLOCK && !RS) fk_zero<Mma, MI, NJ>(accg);
    const int col0 = n0 + wn * WN, kend = c_hi * FK_KC < p.K ? c_hi * FK_KC : p.K;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (c_lo + s < c_hi) fk_load_stage<BM, BN, NTHREADS>(p, smem + s * Tile::STAGE_BYTES, m0, n0, c_lo + s);
        fk_copy_commit();
    }

    for (int c = c_lo; c < c_hi; c++) {
        fk_copy_wait<STAGES - 2>();
        __syncthreads(); /* chunk c has landed; the stage of chunk c-1 is free again */
        {
            int nc = c + STAGES - 1;
            if (nc < c_hi) fk_load_stage<BM, BN, NTHREADS>(p, smem + ((nc - c_lo) % STAGES) * Tile::STAGE_BYTES, m0, n0, nc);
            fk_copy_commit();
        }
        const unsigned char *st = smem + ((c - c_lo) % STAGES) * Tile::STAGE_BYTES;
        const uint16_t *sA = (const uint16_t *)st + wm * WM * FK_LDA;
        const unsigned char *sB = st + Tile::A_BYTES;
#pragma unroll
        for (int ss = 0; ss < FK_KC / Mma::KSS; ss++) {
            const int kbase = c * FK_KC + ss * Mma::KSS;
            if (kbase >= p.K) break;
            if constexpr (BLOCK) {
                /* a group opens here, or this split starts inside one */
                const bool first = kbase == c_lo * FK_KC;
                if (fk_group_opens(p, kbase) || first) {
                    if constexpr (RS) {
                        /* the sum in units of the current group's scale (FK_SCALE_BLOCK_RS): this
                         * group's scales, and the next one's for its close */
                        if (first) fk_group_scales<Mma, NJ>(gsc, p, col0, kbase, lane);
                        else gsc = gnx;
                        const int kn = fk_next_group(p, kbase);
                        fk_group_scales<Mma, NJ>(gnx, p, col0, kn < p.K ? kn : p.K - 1, lane);
                    } else {
                        fk_group_scales<Mma, NJ>(gsc, p, col0, kbase, lane);
                    }
                }
            }
            /* All B fragments of the warp, then one A fragment at a time: keeps registers for
             * two blocks per multiprocessor. */
            typename Mma::BFrag bf[NJ];
#pragma unroll
            for (int nj = 0; nj < NJ; nj++)
                Mma::load_b_smem(bf[nj], sB + (ss * Mma::KSS / 16) * LDB, LDB, wn * WN + nj * Mma::TN, lane);
#pragma unroll
            for (int mi = 0; mi < MI; mi++) {
                typename Mma::AFrag af;
                Mma::load_a_smem(af, sA + mi * 16 * FK_LDA + ss * Mma::KSS, FK_LDA, lane);
#pragma unroll
                for (int j = 0; j < Mma::STEPS; j++)
#pragma unroll
                    for (int nj = 0; nj < NJ; nj++) {
                        if constexpr (BLOCK && !RS) Mma::mma(af, bf[nj], j, accg[mi][nj]);
                        else Mma::mma(af, bf[nj], j, acc[mi][nj]);
                    }
            }
            if constexpr (RS) {
                /* a group ends before this split does: into the next group's units */
                if (fk_group_opens(p, kbase + Mma::KSS) && kbase + Mma::KSS < kend)
                    fk_next_units<Mma, MI, NJ>(acc, gsc, gnx, lane);
            } else if constexpr (BLOCK) {
                if (fk_group_opens(p, kbase + Mma::KSS)) fk_flush<Mma, MI, NJ>(acc, accg, gsc, lane);
            }
        }
    }

    if constexpr (RS) {
        if (c_hi > c_lo) fk_scale_cols<Mma, MI, NJ>(acc, gsc, lane); /* the last group's units */
    } else if constexpr (BLOCK) {
        /* a split may end inside a group: add what is left (zeros when it ended on a boundary) */
        if (p.splits > 1 && c_hi > c_lo) fk_flush<Mma, MI, NJ>(acc, accg, gsc, lane);
    }

    if (p.splits == 1) {
        fk_static_for<MI * NJ>([&](auto q) {
            constexpr int mi = decltype(q)::value / NJ, nj = decltype(q)::value % NJ;
            FkFrag<Mma> f;
#pragma unroll
            for (int i = 0; i < Mma::NACC; i++) f.v[i] = acc[mi][nj][i];
            fk_store_frag<Mma>(p, f, m0 + wm * WM + mi * 16, n0 + wn * WN + nj * Mma::TN, lane);
        });
        return;
    }
#pragma unroll
    for (int mi = 0; mi < MI; mi++)
#pragma unroll
        for (int nj = 0; nj < NJ; nj++)
#pragma unroll
            for (int i = 0; i < Mma::NACC; i++) {
                int row = m0 + wm * WM + mi * 16 + Mma::acc_row(lane, i);
                int col = n0 + wn * WN + nj * Mma::TN + Mma::acc_col(lane, i);
                if (row < p.M && col < p.N) *fk_part(p, blockIdx.z, row, col) = acc[mi][nj][i];
            }
    if (!fk_split_last(p, blockIdx.y * gridDim.x + blockIdx.x)) return;
    fk_split_finish<NTHREADS>(
        p, BM * BN,
        [&](int i, int &r, int &c) {
            r = m0 + i / BN;
            c = n0 + i % BN;
            return r < p.M && c < p.N;
        },
        [&](int r, int c, float v) { fk_store1(p, r, c, v); });
}

/* ---------------------------------- host side ------------------------------------------- */
static int fk_sm_count() {
    static int n;
    if (!n) {
        int dev = 0;
        if (hipGetDevice(&dev) != hipSuccess ||
            hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess || n < 1)
            n = 1;
    }
    return n;
}

/* The shared memory a block may have here: the device's most (NVIDIA: with the opt-in), or
 * less where fk_limit_shared_memory asked for it. A kernel that needs more is not launched:
 * the tiled kernels then run with fewer stages, FK_VARIANT_AUTO's wgmma kernels give way to
 * a tiled one. */
static size_t fk_smem_test_limit;
static size_t fk_smem_limit() {
    static size_t dev_limit;
    if (!dev_limit) {
#if FK_NVIDIA
        const cudaDeviceAttr attr = cudaDevAttrMaxSharedMemoryPerBlockOptin;
#else
        const hipDeviceAttribute_t attr = hipDeviceAttributeMaxSharedMemoryPerBlock;
#endif
        int dev = 0, v = 0;
        if (hipGetDevice(&dev) != hipSuccess || hipDeviceGetAttribute(&v, attr, dev) != hipSuccess || v < 1)
            v = 48 * 1024;
        dev_limit = (size_t)v;
    }
    return fk_smem_test_limit && fk_smem_test_limit < dev_limit ? fk_smem_test_limit : dev_limit;
}
extern "C" void fk_limit_shared_memory(size_t bytes) { fk_smem_test_limit = bytes; }
extern "C" size_t fk_shared_memory_floor(void) { return FK_SMEM_FLOOR; }

/* The largest shared-memory carveout: left to itself the driver may give a kernel less shared
 * memory per multiprocessor than the occupancy calculation (and so the grid) assumed. */
static void fk_prefer_shared(const void *kern) {
#if FK_NVIDIA
    (void)cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, 100);
#else
    (void)kern;
#endif
}

/* Lets kern launch with smem bytes of dynamic shared memory and, with carveout, prefer the
 * largest carveout (fk_prefer_shared); *occ: its blocks of `threads` per multiprocessor (0
 * where the query fails or threads is 0). The runtime's refusal of the shared memory, with
 * *occ = 0. */
static hipError_t fk_prepare(const void *kern, size_t smem, int threads, bool carveout, int *occ) {
    *occ = 0;
    const hipError_t e = hipFuncSetAttribute(kern, hipFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != hipSuccess) return e;
    if (carveout) fk_prefer_shared(kern);
    if (threads > 0 && hipOccupancyMaxActiveBlocksPerMultiprocessor(occ, kern, threads, smem) != hipSuccess) *occ = 0;
    return hipSuccess;
}

#if FK_NVIDIA
static int fk_compute_capability() {
    static int cc = -1;
    if (cc < 0) {
        int dev = 0, major = 0, minor = 0;
        if (hipGetDevice(&dev) != hipSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != hipSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != hipSuccess)
            major = minor = 0;
        cc = major * 10 + minor;
    }
    return cc;
}
#endif

/* Launches kern with programmatic stream serialisation where both the GPU and the kernel's
 * binary have it (compute capability 9.0 and newer, see fk_grid_wait; a binary built for an
 * older target never waits, so it must not start early): back to back, its blocks start as the
 * previous kernel's blocks finish. Elsewhere an ordinary launch. `has` caches the check (-1:
 * not made yet). */
template <class Kern, class... Args>
static hipError_t fk_launch_dependent(Kern kern, int &has, dim3 grid, dim3 block, size_t smem, hipStream_t st,
                                      const Args &...args) {
#if FK_NVIDIA
    if (has < 0) {
        cudaFuncAttributes fa;
        has = fk_compute_capability() >= 90 && cudaFuncGetAttributes(&fa, (const void *)kern) == cudaSuccess &&
              fa.binaryVersion >= 90;
    }
    if (has) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = smem;
        cfg.stream = st;
        cudaLaunchAttribute attr;
        attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr.val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = &attr;
        cfg.numAttrs = 1;
        return cudaLaunchKernelEx(&cfg, kern, args...);
    }
#endif
    (void)has;
    kern<<<grid, block, smem, st>>>(args...);
    return hipGetLastError();
}

#include "gemm_skinny.h"

/* A tiled kernel's blocks per multiprocessor with its shared memory, found once (0: the
 * runtime refused that much shared memory). */
template <class Mma, int WARPS_M, int WARPS_N, int MI, int NJ, int STAGES, int MINB, bool BLOCK, bool RS = false>
static int fk_tiled_occ() {
    constexpr int NTHREADS = WARPS_M * WARPS_N * 32;
    constexpr size_t SMEM = (size_t)STAGES * FkTile<WARPS_M * MI * 16, WARPS_N * NJ * Mma::TN>::STAGE_BYTES;
    static int occ = -1;
    if (occ < 0) {
        auto kern = fk_gemm_tiled<Mma, WARPS_M, WARPS_N, MI, NJ, STAGES, MINB, BLOCK, RS>;
        int o;
        occ = fk_prepare((const void *)kern, SMEM, NTHREADS, true, &o) != hipSuccess ? 0 : o < 1 ? 1 : o;
    }
    return occ;
}

template <class Mma, int WARPS_M, int WARPS_N, int MI, int NJ, int STAGES, int MINB, bool BLOCK, bool RS = false>
static hipError_t fk_go_tiled(FkParams &p, hipStream_t st, size_t *ws_need, void *ws, size_t ws_bytes) {
    constexpr int NTHREADS = WARPS_M * WARPS_N * 32;
    constexpr int BM = WARPS_M * MI * 16, BN = WARPS_N * NJ * Mma::TN;
    constexpr size_t SMEM = (size_t)STAGES * FkTile<BM, BN>::STAGE_BYTES;
    /* Where the device has less shared memory than the stages take (the 128-row tiles' 102–105
     * KiB on sm_86/89/120, 99 KiB), one stage fewer, down to what every GPU of the build has. */
    static_assert(SMEM <= FK_SMEM_FLOOR || STAGES > 2, "some stage count fits every GPU of the build");
    if (SMEM > fk_smem_limit()) {
        if constexpr (SMEM > FK_SMEM_FLOOR)
            return fk_go_tiled<Mma, WARPS_M, WARPS_N, MI, NJ, STAGES - 1, MINB, BLOCK, RS>(p, st, ws_need, ws, ws_bytes);
        else return hipErrorNotSupported;
    }
    auto kern = fk_gemm_tiled<Mma, WARPS_M, WARPS_N, MI, NJ, STAGES, MINB, BLOCK, RS>;
    const int occ = fk_tiled_occ<Mma, WARPS_M, WARPS_N, MI, NJ, STAGES, MINB, BLOCK, RS>();
    if (!occ) return hipErrorNotSupported;
    /* Too few tiles to fill the GPU (small M and N): split K over blocks, as long as the
     * partial sums (written and read once) stay below the weight's own traffic. */
    const long long tiles = (long long)((p.N + BN - 1) / BN) * ((p.M + BM - 1) / BM);
    const int nchunks = (p.K + FK_KC - 1) / FK_KC;
    int splits = 1;
    if (tiles <= FK_MAX_COUNTERS && tiles * 2 <= (long long)occ * fk_sm_count()) {
        long long s = (long long)occ * fk_sm_count() / tiles;
        long long by_k = nchunks / 4, by_traffic = p.K / (16LL * p.M);
        if (s > by_k) s = by_k;
        if (s > by_traffic) s = by_traffic;
        splits = s > 1 ? (int)s : 1;
    }
    size_t need = splits > 1 ? FK_COUNTER_BYTES + (size_t)splits * p.M * p.N * sizeof(float) : 0;
    if (ws_need) {
        *ws_need = need;
        return hipSuccess;
    }
    if (need > ws_bytes || (need && !ws)) return hipErrorInvalidValue;
    p.splits = splits;
    p.count = (unsigned *)ws;
    p.part = need ? (float *)((unsigned char *)ws + FK_COUNTER_BYTES) : nullptr;
    /* grid.y is limited to 65535 blocks: very tall A goes in slices (never split: many tiles). */
    const int max_rows = 65535 * BM;
    for (int r0 = 0; r0 < p.M; r0 += max_rows) {
        FkParams q = p;
        q.A = p.A + (size_t)r0 * p.K;
        q.Y = p.Y + (size_t)r0 * p.N;
        q.M = p.M - r0 < max_rows ? p.M - r0 : max_rows;
        dim3 grid((p.N + BN - 1) / BN, (q.M + BM - 1) / BM, splits);
        kern<<<grid, NTHREADS, SMEM, st>>>(q);
        hipError_t e = hipGetLastError();
        if (e != hipSuccess) return e;
    }
    return hipSuccess;
}

#if FK_FRAG_NV

/* The driver's tensor-map encoder, reached through the runtime (no link against the driver
 * library); null when unavailable. */
typedef CUresult (*FkEncodeTiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                  const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                  CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
static FkEncodeTiled fk_encode_tiled() {
    static FkEncodeTiled fn;
    static bool tried;
    if (!tried) {
        tried = true;
        void *f = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (FkEncodeTiled)f;
    }
    return fn;
}

/* Tensor maps of the warp-specialised kernels: A (K × M halves, boxes of 64 × BNA, 128-byte
 * swizzle) and the packed weight (records as pairs of 8-byte words: 2N × K/16, boxes of HROWS
 * records × 4 kb). False when they cannot be made (no encoder, misaligned pointers). */
template <int BNA, int HROWS>
static bool fk_ws_maps(const FkParams &p, CUtensorMap *ta, CUtensorMap *tw) {
    FkEncodeTiled enc = fk_encode_tiled();
    const cuuint32_t ones[2] = {1, 1};
    const cuuint64_t dim_a[2] = {(cuuint64_t)p.K, (cuuint64_t)p.M}, stride_a[1] = {(cuuint64_t)p.K * 2};
    const cuuint32_t box_a[2] = {64, BNA};
    const cuuint64_t dim_w[2] = {(cuuint64_t)p.N * 2, (cuuint64_t)p.K / 16}, stride_w[1] = {(cuuint64_t)p.N * 16};
    const cuuint32_t box_w[2] = {HROWS * 2, 4};
    return enc &&
           enc(ta, CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, (void *)p.A, dim_a, stride_a, box_a, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS &&
           enc(tw, CU_TENSOR_MAP_DATA_TYPE_UINT64, 2, (void *)p.Q, dim_w, stride_w, box_w, ones, CU_TENSOR_MAP_INTERLEAVE_NONE,
               CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* Whether kern was compiled to the registers at entry that Tile assumes: with a producer
 * warpgroup, consumers asking more registers than the producer gives back would wait forever. */
template <class Tile>
static bool fk_ws_regs_as_assumed(const void *kern) {
    cudaFuncAttributes fa;
    return !Tile::PRODUCER_WG || (cudaFuncGetAttributes(&fa, kern) == cudaSuccess && fa.numRegs == Tile::ENTRY_REGS);
}

/* Warp-specialised wgmma kernel with NWG consumer warpgroups: one block per multiprocessor.
 * hipErrorNotSupported, before launching anything, where the tensor maps cannot be made or the
 * kernel was compiled to other registers than assumed (fk_gemm then takes a tiled kernel). */
template <int BNA, int STAGES, int NWG, bool BLOCK, bool RESCALE = false>
static hipError_t fk_go_wgws(FkParams &p, hipStream_t st, size_t *ws_need, bool rescale = false) {
    typedef FkWsTile<BNA, STAGES, NWG, BLOCK> Tile;
    /* block scales that passed the host's check: the kernel that keeps its sums in units of the
     * current group (an instantiation of its own, with its own launch caches) */
    if constexpr (BLOCK && !RESCALE)
        if (rescale) return fk_go_wgws<BNA, STAGES, NWG, BLOCK, true>(p, st, ws_need);
    if (fk_compute_capability() != 90) return hipErrorInvalidValue;
    if (ws_need) {
        *ws_need = 0;
        return hipSuccess;
    }
    CUtensorMap ta, tw;
    if (Tile::SMEM > fk_smem_limit() || !fk_ws_maps<BNA, Tile::HROWS>(p, &ta, &tw)) return hipErrorNotSupported;
    auto kern = [] {
        if constexpr (NWG == 3) return fk_gemm_wgws3<BNA, STAGES, BLOCK>;
        else return fk_gemm_wgws<BNA, STAGES, BLOCK, RESCALE>;
    }();
    static int occ = -1;
    if (occ < 0) {
        (void)fk_prepare((const void *)kern, Tile::SMEM, Tile::THREADS, true, &occ); /* refused: occ 0 */
        if (!fk_ws_regs_as_assumed<Tile>((const void *)kern)) occ = 0;
    }
    if (occ < 1) return hipErrorNotSupported; /* registers or shared memory refused */
    const long long tiles = (long long)((p.N + Tile::WBN - 1) / Tile::WBN) * ((p.M + BNA - 1) / BNA);
    if (tiles > 0x7fffffffLL) return hipErrorInvalidValue;
    const int grid = tiles < fk_sm_count() ? (int)tiles : fk_sm_count();
    static int dependent = -1;
    return fk_launch_dependent(kern, dependent, dim3(grid), dim3(Tile::THREADS), Tile::SMEM, st, ta, tw, p);
}

/* Split runs of fewer chunks than this cost more in partial sums than they save. */
#define FK_SK_MIN_CHUNKS 8

/* The work of fk_gemm_wgsk: whole tiles round robin, and the last one to two waves' chunks
 * divided evenly (none when the tiles fill whole waves). */
template <int BNA>
static FkSkWork fk_sk_plan(const FkParams &p) {
    FkSkWork w;
    const long long tiles = (long long)((p.N + FK_WG_BN - 1) / FK_WG_BN) * ((p.M + BNA - 1) / BNA);
    w.ntiles = tiles > 0x7fffffffLL ? 0 : (int)tiles;
    w.nchunks = (p.K + 63) / 64;
    long long g = fk_sm_count();
    /* the split chunks are fewer than 2 · grid · nchunks: the kernel counts them in int */
    const bool split = 2 * g * w.nchunks <= 0x7fffffffLL;
    if (g > tiles) {
        /* fewer tiles than multiprocessors: more blocks than tiles only with split, as long as
         * each gets a run of FK_SK_MIN_CHUNKS */
        const long long by_work = tiles * w.nchunks / FK_SK_MIN_CHUNKS;
        g = split && by_work > tiles ? (by_work < g ? by_work : g) : tiles;
    }
    w.grid = (int)g;
    w.dp = !split || tiles % g == 0 ? w.ntiles : tiles >= 2 * g ? (int)((tiles / g - 1) * g) : 0;
    return w;
}

/* Warp-specialised kernel with the last waves split between blocks. */
template <int BNA, int STAGES, bool BLOCK, bool RESCALE = false>
static hipError_t fk_go_wgsk(FkParams &p, hipStream_t st, size_t *ws_need, void *ws, size_t ws_bytes,
                             bool rescale = false) {
    typedef FkWsTile<BNA, STAGES, 2, BLOCK> Tile;
    /* as in fk_go_wgws */
    if constexpr (BLOCK && !RESCALE)
        if (rescale) return fk_go_wgsk<BNA, STAGES, BLOCK, true>(p, st, ws_need, ws, ws_bytes);
    if (fk_compute_capability() != 90) return hipErrorInvalidValue;
    const FkSkWork w = fk_sk_plan<BNA>(p);
    if (!w.ntiles) return hipErrorInvalidValue;
    const size_t need = w.dp < w.ntiles ? FK_COUNTER_BYTES + (size_t)w.grid * Tile::WBN * BNA * sizeof(float) : 0;
    if (ws_need) {
        *ws_need = need;
        return hipSuccess;
    }
    if (need > ws_bytes || (need && !ws)) return hipErrorInvalidValue;
    p.count = (unsigned *)ws;
    p.part = need ? (float *)((unsigned char *)ws + FK_COUNTER_BYTES) : nullptr;
    /* as fk_go_wgws: hipErrorNotSupported before any launch where this kernel cannot run */
    CUtensorMap ta, tw;
    if (Tile::SMEM > fk_smem_limit() || !fk_ws_maps<BNA, Tile::HROWS>(p, &ta, &tw)) return hipErrorNotSupported;
    constexpr size_t SMEM = Tile::SMEM;
    auto kern = [] {
        if constexpr (BLOCK) return fk_gemm_wgsk_block<BNA, STAGES, RESCALE>;
        else return fk_gemm_wgsk<BNA, STAGES>;
    }();
    static bool tried;
    static hipError_t prepared;
    if (!tried) {
        int occ; /* not asked: one block per multiprocessor, as the grid assumes */
        prepared = fk_prepare((const void *)kern, SMEM, 0, true, &occ);
        if (prepared == hipSuccess && !fk_ws_regs_as_assumed<Tile>((const void *)kern)) prepared = hipErrorNotSupported;
        tried = true;
    }
    if (prepared != hipSuccess) return hipErrorNotSupported; /* shared memory or registers refused */
    static int dependent = -1;
    return fk_launch_dependent(kern, dependent, dim3(w.grid), dim3(Tile::THREADS), SMEM, st, ta, tw, p, w);
}
#endif

/* A tiled variant by scale kind: its tensor scales' configuration T (warps along M and N,
 * fragments MI and NJ, stages, blocks per multiprocessor; fk_go_tiled's order), taken also by
 * block scales in units of the current group (rescale: no second accumulator set), and the
 * two-set configuration B of the other block scales. */
template <int... C>
struct FkTiles {};
template <class Mma, bool BLOCK, int... T, int... B>
static hipError_t fk_go_tiles(FkTiles<T...>, FkTiles<B...>, bool rescale, FkParams &p, hipStream_t st, size_t *ws_need,
                              void *ws, size_t ws_bytes) {
    if constexpr (BLOCK) {
        if (rescale) return fk_go_tiled<Mma, T..., true, true>(p, st, ws_need, ws, ws_bytes);
        return fk_go_tiled<Mma, B..., true>(p, st, ws_need, ws, ws_bytes);
    } else {
        (void)rescale;
        return fk_go_tiled<Mma, T..., false>(p, st, ws_need, ws, ws_bytes);
    }
}

#if FK_FRAG_NV
/* NVIDIA's 64-row tiles (FK_VARIANT_TILE64) by scale kind: warps along M and N, fragments MI and
 * NJ, stages, blocks per multiprocessor. fk_go launches them, fk_pick_tiled asks how many of
 * their blocks fit a multiprocessor. */
#define FK_TILE64_NV_BLOCK 2, 4, 2, 4, 4, 2
#define FK_TILE64_NV_TENSOR 1, 4, 4, 4, 4, 3
#endif

/* One variant × one scale kind/P: the kernel configurations. */
template <class Mma, bool BLOCK>
static hipError_t fk_go(int variant, FkParams &p, bool rescale, hipStream_t st, size_t *ws_need, void *ws,
                        size_t ws_bytes) {
#if FK_FRAG_NV
    /* Warp tiles of 64×32 (MI=4, NJ=4) keep 2 blocks of 8 warps per multiprocessor within the
     * register file; block scales with a second accumulator set use 32×32 warp tiles. */
    switch (variant) {
    case FK_VARIANT_SKINNY16:
        if constexpr (BLOCK) {
            if (rescale) return fk_go_skinny16<Mma, BLOCK, true>(p, st, ws_need, ws, ws_bytes);
        }
        return fk_go_skinny16<Mma, BLOCK>(p, st, ws_need, ws, ws_bytes);
    case FK_VARIANT_SKINNY32:
        /* with checked block scales its forms in units of the current group from 32-k
         * super-steps (block:32 and coarser; fk_go_skinny32). At 16 k (block:16) their 4 blocks
         * per multiprocessor are what the sets per group take too, and they measured from 6 %
         * faster to 11 % slower (H100 back to back, M = 17 / 32, 13824×5120 72.80 / 74.56 →
         * 69.02 / 74.33 µs, 28672×8192 204.56 / 214.49 → 227.60 / 242.86). */
        if constexpr (BLOCK && Mma::KSS >= 32) {
            if (rescale) return fk_go_skinny32<Mma, BLOCK, true>(p, st, ws_need, ws, ws_bytes);
        }
        return fk_go_skinny32<Mma, BLOCK>(p, st, ws_need, ws, ws_bytes);
    /* Block scales in units of the current group (rescale: no second accumulator set) take the
     * tensor scales' tiles: H100 back to back, block:128, against the two-set tiles, tile64
     * 1.05–1.28× faster at M = 256–4096 (3072² M = 1024 124.7 → 97.4 µs, 3072×12288 470.7 →
     * 354.1), tile128 1.3–1.5× at M ≥ 1024 (8192² M = 1024 858.5 → 594.4); the pick on the
     * H100 with block:32 1.13–1.54× at M = 256–4096 (3072×12288 M = 1024 715.1 → 465.4). But
     * at M = 64 the two-set tile64 blocks of 8 warps were 1.06–1.29× faster than the tensor
     * scales' 4, so up to M = 128 tile64 keeps them. */
    case FK_VARIANT_TILE64:
        return fk_go_tiles<Mma, BLOCK>(FkTiles<FK_TILE64_NV_TENSOR>{}, FkTiles<FK_TILE64_NV_BLOCK>{}, rescale && p.M > 128,
                                       p, st, ws_need, ws, ws_bytes);
    case FK_VARIANT_TILE128:
        return fk_go_tiles<Mma, BLOCK>(FkTiles<2, 4, 4, 4, 4, 2>{}, FkTiles<4, 4, 2, 4, 4, 1>{}, rescale, p, st, ws_need,
                                       ws, ws_bytes);
    case FK_VARIANT_TILE256:
        return fk_go_tiles<Mma, BLOCK>(FkTiles<2, 4, 4, 8, 3, 1>{}, FkTiles<4, 4, 2, 4, 4, 1>{}, rescale, p, st, ws_need,
                                       ws, ws_bytes);
    /* the wgmma kernels: block groups must be whole 64-k chunks. With block scales the
     * two-warpgroup kernels keep a second accumulator set, in units of the current group's
     * scale where the caller allows it (rescale, RS2 in fk_ws_body), else for the exact close. */
    case FK_VARIANT_WS128:
        if constexpr (Mma::KSS == 64) return fk_go_wgws<128, 8, 2, BLOCK>(p, st, ws_need, rescale);
        else return hipErrorInvalidValue;
    case FK_VARIANT_WS64:
        if constexpr (Mma::KSS == 64) return fk_go_wgws<64, 10, 2, BLOCK>(p, st, ws_need, rescale);
        else return hipErrorInvalidValue;
    case FK_VARIANT_SK128:
        if constexpr (Mma::KSS == 64) return fk_go_wgsk<128, 8, BLOCK>(p, st, ws_need, ws, ws_bytes, rescale);
        else return hipErrorInvalidValue;
    case FK_VARIANT_SK64:
        if constexpr (Mma::KSS == 64) return fk_go_wgsk<64, 10, BLOCK>(p, st, ws_need, ws, ws_bytes, rescale);
        else return hipErrorInvalidValue;
    case FK_VARIANT_WS192:
        /* block scales: one set in units of the current group where the caller allows it, else
         * ws128 (no room for a second accumulator set) */
        if constexpr (Mma::KSS == 64 && !BLOCK) return fk_go_wgws<128, 7, 3, false>(p, st, ws_need);
        else if constexpr (Mma::KSS == 64)
            return rescale ? fk_go_wgws<128, 7, 3, true, true>(p, st, ws_need) : fk_go_wgws<128, 8, 2, true>(p, st, ws_need);
        else return hipErrorInvalidValue;
    case FK_VARIANT_WS256:
        /* block scales: one set in units of the current group where the caller allows it, else
         * ws128 (no room for a second set of 128 accumulators); sk256 likewise with sk128 */
        if constexpr (Mma::KSS == 64 && !BLOCK) return fk_go_wgws<256, 5, 2, false>(p, st, ws_need);
        else if constexpr (Mma::KSS == 64)
            return rescale ? fk_go_wgws<256, 5, 2, true, true>(p, st, ws_need) : fk_go_wgws<128, 8, 2, true>(p, st, ws_need);
        else return hipErrorInvalidValue;
    case FK_VARIANT_SK256:
        if constexpr (Mma::KSS == 64 && !BLOCK) return fk_go_wgsk<256, 5, false>(p, st, ws_need, ws, ws_bytes);
        else if constexpr (Mma::KSS == 64)
            return rescale ? fk_go_wgsk<256, 5, true, true>(p, st, ws_need, ws, ws_bytes)
                           : fk_go_wgsk<128, 8, true>(p, st, ws_need, ws, ws_bytes);
        else return hipErrorInvalidValue;
    }
#else
    switch (variant) {
    case FK_VARIANT_SKINNY16: return fk_go_skinny16<Mma, BLOCK>(p, st, ws_need, ws, ws_bytes);
    case FK_VARIANT_SKINNY32: return fk_go_skinny32<Mma, BLOCK>(p, st, ws_need, ws, ws_bytes);
    case FK_VARIANT_TILE64: return fk_go_tiled<Mma, 2, 2, 2, 2, 2, 1, BLOCK>(p, st, ws_need, ws, ws_bytes);
    case FK_VARIANT_TILE128:
    case FK_VARIANT_TILE256:
        /* the second accumulator set of block scales does not fit 4×2 WMMA tiles per wave */
        return fk_go_tiles<Mma, BLOCK>(FkTiles<2, 2, 4, 2, 2, 1>{}, FkTiles<2, 2, 2, 2, 2, 1>{}, rescale, p, st, ws_need,
                                       ws, ws_bytes);
    }
#endif
    return hipErrorInvalidValue;
}


#if FK_FRAG_NV
/* P for MmaNv: the largest of 4, 2, 1 whose super-step (16P) divides the block group. */
static int fk_pick_p(int kind, int group) {
    if (kind != FK_SCALE_BLOCK) return 4;
    return group % 64 == 0 ? 4 : group % 32 == 0 ? 2 : 1;
}
#endif

/* rescale: the caller passed FK_SCALE_BLOCK_RS (p.kind is FK_SCALE_BLOCK) */
static hipError_t fk_dispatch(int variant, FkParams &p, bool rescale, hipStream_t st, size_t *ws_need, void *ws,
                              size_t ws_bytes) {
    const bool block = p.kind == FK_SCALE_BLOCK;
#if FK_FRAG_NV
    switch (fk_pick_p(p.kind, p.G)) {
    case 4: return block ? fk_go<MmaNv<4>, true>(variant, p, rescale, st, ws_need, ws, ws_bytes)
                         : fk_go<MmaNv<4>, false>(variant, p, rescale, st, ws_need, ws, ws_bytes);
    case 2: return fk_go<MmaNv<2>, true>(variant, p, rescale, st, ws_need, ws, ws_bytes);
    default: return fk_go<MmaNv<1>, true>(variant, p, rescale, st, ws_need, ws, ws_bytes);
    }
#else
    return block ? fk_go<MmaAmd, true>(variant, p, rescale, st, ws_need, ws, ws_bytes)
                 : fk_go<MmaAmd, false>(variant, p, rescale, st, ws_need, ws, ws_bytes);
#endif
}

/* FK_SCALE_BLOCK_RS is block scales to everything but the choice of kernel. */
static int fk_scale_base(int kind) { return kind == FK_SCALE_BLOCK_RS ? FK_SCALE_BLOCK : kind; }

/* Above M = 32 where no wgmma kernel is picked, or one cannot run (fk_go_wgws). */
static int fk_pick_tiled(int64_t m, bool block) {
#if FK_FRAG_NV
    /* Where two blocks of 64-row tiles fit a multiprocessor (H100, A100; they then hold at least
     * as many outputs as the 128-row tiles' blocks), the 64-row tiles: with block scales at
     * every M (H100, block:128: the fastest tiles at all 29 points measured from M = 64 to 4096,
     * by 1.02–1.91× over the 128-row ones above M = 128, e.g. 3072×12288 M = 1024 649.5 →
     * 470.0 µs back to back), with tensor scales up to M = 384 (11 of 12 points at M = 192–384,
     * 1.08–1.56×, e.g. 3072² M = 256 59.8 → 40.9; one 3 % slower; at M = 448 and 512 the
     * 128-row tiles won 6 of 8 points, by 3–8 %). Elsewhere (sm_86/89: one block fits) as
     * before, unmeasured. */
    const bool two = block ? fk_tiled_occ<MmaNv<4>, FK_TILE64_NV_BLOCK, true>() >= 2
                           : fk_tiled_occ<MmaNv<4>, FK_TILE64_NV_TENSOR, false>() >= 2;
    if (two) return block || m <= 384 ? FK_VARIANT_TILE64 : FK_VARIANT_TILE128;
#else
    (void)block;
#endif
    return m <= 128 ? FK_VARIANT_TILE64 : FK_VARIANT_TILE128;
}

extern "C" int fk_gemm_pick(int64_t m, int64_t n, int64_t k, int kind, int group) {
    const bool rescale = kind == FK_SCALE_BLOCK_RS;
    kind = fk_scale_base(kind);
    /* M ≤ 16 (H100 measurements): the skinny16 kernel's one-wave forms where they apply (see
     * fk_go_skinny16); else with block scales its 4-warp blocks, without them the M ≤ 32
     * kernel's narrower column tiles, unless the weight is large (more than ~40 M bytes), M ≤ 8
     * and the 4-warp blocks fill one wave to 85 % or more. */
    if (m <= 16) {
        if (kind == FK_SCALE_BLOCK || fk_skinny16_form(n, false)) return FK_VARIANT_SKINNY16;
        /* With 9–16 rows the M ≤ 32 kernel also where the weight is large (H100, M = 16, tensor
         * scales: 1.02–1.15× the 4-warp skinny16 at 11008×4096, 4096×11008, 14336×4096,
         * 4096×14336, 13824×5120, 28672×8192). With at most 8 rows (on NVIDIA both kernels with
         * their operands swapped) it depends on the 4-warp blocks' grid. Where they fill one
         * wave to 85 % or more, or take more than one, skinny16: M = 1 / 8 against skinny32, H200
         * 11008×4096 13.03 / 13.56 against 15.03 / 15.45 µs, 8192×28672 52.3 / 52.6 against
         * 57.6 / 58.4, 28672×8192 56.0 / 56.1 against 60.0 / 61.0 (H100 level there, 78.7
         * against 78.4 / 78.9; 4096×11008 3–6 % slower on both). Where they fill 55–57 %
         * (14336×4096, 13824×5120), skinny32: 1–4 % faster on both. Unswapped (gfx11) the grid
         * of more than a wave goes to skinny32, as it measured before the swap (H100, 28672×8192
         * M = 1: 81.1 against 91.2 µs). */
        if (n * k <= (40ll << 20) || m > 8) return FK_VARIANT_SKINNY32;
        FkParams p = {};
        p.N = (int)n;
        p.K = (int)k;
        const double fill = fk_skinny16_fill(p);
#if FK_FRAG_NV
        if (fill == 0.0) return FK_VARIANT_SKINNY16;
#endif
        return fill >= 0.85 ? FK_VARIANT_SKINNY16 : FK_VARIANT_SKINNY32;
    }
    if (m <= 32) return FK_VARIANT_SKINNY32;
#if FK_FRAG_NV
    if (fk_compute_capability() == 90 && (kind != FK_SCALE_BLOCK || group % 64 == 0))
        return fk_pick_hopper(m, n, k, kind == FK_SCALE_BLOCK, rescale, fk_sm_count());
#else
    (void)kind; (void)group; (void)rescale;
#endif
    return fk_pick_tiled(m, kind == FK_SCALE_BLOCK);
}

static bool fk_shape_ok(int64_t m, int64_t n, int64_t k, int kind, int group) {
    const int64_t lim = 0x7fffffff;
    kind = fk_scale_base(kind);
    if (m < 1 || n < 8 || k < 16 || m > lim || n > lim || k > lim) return false;
    if (n % 8 || k % 16) return false;
    if (kind == FK_SCALE_BLOCK && (group < 16 || group % 16 || k % group)) return false;
    return kind >= FK_SCALE_NONE && kind <= FK_SCALE_BLOCK;
}

static FkParams fk_params(int64_t m, int64_t n, int64_t k, const void *a, const void *q, const float *scales,
                          int kind, int group, const void *bias, int out_bf16, void *y) {
    FkParams p;
    p.A = (const uint16_t *)a;
    p.Q = (const uint8_t *)q;
    p.S = scales;
    p.bias = (const uint16_t *)bias;
    p.Y = (uint16_t *)y;
    p.part = nullptr;
    p.count = nullptr;
    p.M = (int)m;
    p.N = (int)n;
    p.K = (int)k;
    p.kind = fk_scale_base(kind);
    p.G = p.kind == FK_SCALE_BLOCK ? group : (int)k;
    p.gpr = (int)(k / p.G);
    p.gshift = fk_gshift(p.G);
    p.out_bf16 = out_bf16;
    p.splits = 1;
    return p;
}

/* FK_VARIANT_AUTO runs the pick, or where that is a wgmma kernel that cannot run here (no
 * tensor map, registers or shared memory refused: hipErrorNotSupported before any launch) the
 * tiled kernel for M (-1: no second choice). */
static int fk_second_choice(int64_t m, int kind, int picked) {
    return picked >= FK_VARIANT_WS128 ? fk_pick_tiled(m, fk_scale_base(kind) == FK_SCALE_BLOCK) : -1;
}

extern "C" size_t fk_gemm_workspace(int64_t m, int64_t n, int64_t k, int kind, int group, int variant) {
    if (!fk_shape_ok(m, n, k, kind, group)) return 0;
    const bool automatic = variant == FK_VARIANT_AUTO;
    if (automatic) variant = fk_gemm_pick(m, n, k, kind, group);
    FkParams p = fk_params(m, n, k, nullptr, nullptr, nullptr, kind, group, nullptr, 0, nullptr);
    const bool rs = kind == FK_SCALE_BLOCK_RS;
    size_t need = 0, need2 = 0;
    const bool first = fk_dispatch(variant, p, rs, 0, &need, nullptr, 0) == hipSuccess;
    const int second = automatic ? fk_second_choice(m, kind, variant) : -1;
    const bool other = second >= 0 && fk_dispatch(second, p, rs, 0, &need2, nullptr, 0) == hipSuccess;
    if (!first) need = 0;
    if (!other) need2 = 0;
    return need > need2 ? need : need2; /* either may be the one that runs */
}

extern "C" int fk_gemm(int64_t m, int64_t n, int64_t k, const void *a, const void *q, const float *scales,
                       int kind, int group, const void *bias, int out_bf16, void *y, void *workspace,
                       size_t workspace_bytes, int variant, void *stream) {
    if (!fk_shape_ok(m, n, k, kind, group) || variant < 0 || variant >= FK_VARIANT_COUNT) return hipErrorInvalidValue;
    /* the kernels' 16-byte loads of A and Q (and the tensor maps' base addresses), 4-byte
     * stores of pairs of Y, scalar loads of the scales and bias */
    if ((uintptr_t)a % 16 || (uintptr_t)q % 16 || (uintptr_t)y % 4 || (uintptr_t)scales % 4 || (uintptr_t)bias % 2)
        return hipErrorInvalidValue;
    const bool automatic = variant == FK_VARIANT_AUTO;
    if (automatic) variant = fk_gemm_pick(m, n, k, kind, group);
    FkParams p = fk_params(m, n, k, a, q, scales, kind, group, bias, out_bf16, y);
    const bool rs = kind == FK_SCALE_BLOCK_RS;
    hipError_t e = fk_dispatch(variant, p, rs, (hipStream_t)stream, nullptr, workspace, workspace_bytes);
    const int second = automatic ? fk_second_choice(m, kind, variant) : -1;
    if (e == hipErrorNotSupported && second >= 0) {
        p = fk_params(m, n, k, a, q, scales, kind, group, bias, out_bf16, y);
        e = fk_dispatch(second, p, rs, (hipStream_t)stream, nullptr, workspace, workspace_bytes);
    }
    return e;
}

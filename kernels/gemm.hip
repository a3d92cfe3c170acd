/*
 * Y = A · (S ⊙ Q)ᵀ (+ bias) with A fp16 and Q the (K/16, N, 16) e5m2 weight; f32 sums.
 *
 * Two kernels, both written once over a vendor fragment layer (Mma = MmaNv<P> or MmaAmd):
 *   skinny  M ≤ 16·MI rows. Weight-bandwidth bound: each lane loads its B fragment straight
 *           from global memory into registers (the weight never passes through shared
 *           memory), next super-step's loads in flight while the current one computes; the W
 *           warps of a block split K and add their sums through shared memory. Where a wave
 *           of one block per column tile would leave the GPU idle, several blocks split a
 *           tile's K too, and the last block of a tile to finish adds their partial sums in a
 *           fixed order (deterministic) and writes the output; where the tiles make one wave
 *           of one block per multiprocessor, blocks of 7–24 warps avoid that serial tail. On
 *           Hopper, launches back to back overlap: each block warms L2 with its first weight
 *           bytes while the previous kernel finishes (programmatic dependent launch, vendor.h).
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
    float s[SPL];
};
template <class Mma, int NJ>
__device__ __forceinline__ void fk_group_scales(FkGroupScales<Mma, NJ> &g, const FkParams &p, int col0, int k, int lane) {
    typedef FkGroupScales<Mma, NJ> G;
#pragma unroll
    for (int i = 0; i < G::SPL; i++)
        g.s[i] = G::COLS % 32 == 0 || lane + 32 * i < G::COLS ? fk_block_scale(p, col0 + lane + 32 * i, k) : 0.0f;
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

/* ------------------------------------------------------------------------------------------ */
/* One super-step's operands and, with block scales, its group's scales. */
template <class Mma, int MI, int NJ>
struct FkSkinnyFrags {
    typename Mma::AFrag a[MI];
    typename Mma::BFrag b[NJ];
    FkGroupScales<Mma, NJ> g;
};

/* The super-step at kbase (its rows of A unless LOAD_A is false); its group's scales where it
 * opens a group (open), else the previous super-step's (prev). With AHEAD the opening group's
 * scales are those loaded one group earlier (*ahead), and *ahead is sent for the group after
 * it where that starts before kend. */
template <class Mma, int MI, int NJ, bool BLOCK, bool LOAD_A = true, bool AHEAD = false>
__device__ __forceinline__ void fk_skinny_load(FkSkinnyFrags<Mma, MI, NJ> &f, const FkParams &p, int kbase, int n0,
                                               int lane, bool open, const FkGroupScales<Mma, NJ> &prev,
                                               FkGroupScales<Mma, NJ> *ahead = nullptr, int kend = 0) {
#pragma unroll
    for (int nj = 0; nj < NJ; nj++) Mma::load_b_gmem(f.b[nj], p, kbase, n0 + nj * Mma::TN, lane);
    if constexpr (LOAD_A)
#pragma unroll
        for (int mi = 0; mi < MI; mi++) Mma::load_a_gmem(f.a[mi], p, mi * 16, kbase, lane);
    if constexpr (BLOCK) {
        if (!open) {
            f.g = prev;
        } else if constexpr (AHEAD) {
            f.g = *ahead;
            const int kn = fk_next_group(p, kbase);
            if (kn < kend) fk_group_scales<Mma, NJ>(*ahead, p, n0, kn, lane);
        } else {
            fk_group_scales<Mma, NJ>(f.g, p, n0, kbase, lane);
        }
    }
}

/* V (1 or 4) consecutive floats, 4V-byte aligned, in one load. */
template <int V>
__device__ __forceinline__ void fk_ld_f32(const float *ptr, float *v) {
    if constexpr (V == 4) {
        const float4 t = *(const float4 *)ptr;
        v[0] = t.x; v[1] = t.y; v[2] = t.z; v[3] = t.w;
    } else {
        v[0] = *ptr;
    }
}

template <class Mma, int MI, int NJ, int W, bool BLOCK, int MINB = 1, bool A_LATE = BLOCK, bool RS = false,
          bool PAIR = false, bool SWAP = false>
__global__ void __launch_bounds__(W * 32, MINB) fk_gemm_skinny(FkParams p) {
    constexpr int BN = NJ * Mma::TN, ROWS = MI * 16, LDR = BN + 4;
    /* SWAP (M <= 8, NVIDIA; tensor or channel scales, or block scales in units of the current
     * group): the weight is the product's 16-row operand and A the 8-column one, so that one
     * instruction takes two fragments' columns (NA of them). */
    static_assert(!SWAP || (MI == 1 && (!BLOCK || RS)), "the swapped product: one row fragment, one accumulator set");
    constexpr int NA = FkAccTiles<NJ, SWAP>::N;
    /* The sums after the loop take V adjacent columns per thread where the tile is wide: at 96
     * columns and 6 warps, one column each made 8 rounds of dependent loads and stores at
     * M = 16, all of it after the weight's last bytes had arrived. Not with two A fragments,
     * whose registers are short (gfx1100 spilled with block scales). (LDR keeps rows 16-byte
     * aligned.) */
    constexpr int V = MI == 1 && BN >= 64 ? 4 : 1;
    extern __shared__ float fk_red[]; /* [W][ROWS][LDR] */
    auto red = reinterpret_cast<float (*)[ROWS][LDR]>(fk_red);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n0 = blockIdx.x * BN, split = blockIdx.y;
    /* Super-steps are dealt out as contiguous runs, one per warp of every block of the tile. */
    const int nss = (p.K + Mma::KSS - 1) / Mma::KSS;
    const int seg = split * W + warp, nseg = p.splits * W;
    const int ss_lo = (int)((long long)seg * nss / nseg), ss_hi = (int)((long long)(seg + 1) * nss / nseg);

    float acc[MI][NA][Mma::NACC];
    float accg[MI][NJ][Mma::NACC];
    fk_zero<Mma, MI, NA>(acc);
    if constexpr (BLOCK && !RS) fk_zero<Mma, MI, NJ>(accg);

    /* Back to back (Hopper): the first FK_SKINNY_WARM super-steps of this warp's weight go to
     * L2 while the kernel before this one finishes, and the first one on to registers (with
     * its group's scales); only then A, Y and the workspace. (The first super-step's weight in
     * registers before the wait instead of after it: H100 back to back, tensor scales, 14
     * shapes at M = 1, 16 and 32: 1–7 % faster at most, e.g. 3072² M = 16 6.12 → 5.80 µs,
     * 3072×12288 14.64 → 14.32; 1–5 % slower at 4096² and 2048² with M ≤ 16.) The next
     * kernel may be launched as soon as every block is past that point: its blocks then take the
     * places of this kernel's as they finish, and warm L2 in this one's tail. (Released after
     * the main loop instead, the next kernel waited for the slowest block's loop: up to 4 %
     * slower on the H100, never faster. Leaving it room beside this one, a grid of one block per
     * multiprocessor fewer, was 5–40 % slower.) */
    {
        constexpr int LINES = BN * 16 / 128; /* 128-byte lines per K/16 row of the tile */
        const int kb0 = ss_lo * Mma::KSS / 16;
        const int nkb = ((ss_hi - ss_lo < FK_SKINNY_WARM ? ss_hi - ss_lo : FK_SKINNY_WARM) * Mma::KSS) / 16;
        const int kbn = kb0 + nkb < p.K / 16 ? nkb : p.K / 16 - kb0;
        const int bytes = (p.N - n0 < BN ? p.N - n0 : BN) * 16;
        for (int i = lane; i < kbn * LINES; i += 32)
            if ((i % LINES) * 128 < bytes) fk_prefetch_l2(p.Q + ((size_t)(kb0 + i / LINES) * p.N + n0) * 16 + (i % LINES) * 128);
    }
    FkSkinnyFrags<Mma, MI, NJ> f0, f1;
    if (ss_lo < ss_hi) fk_skinny_load<Mma, MI, NJ, BLOCK, false>(f0, p, ss_lo * Mma::KSS, n0, lane, true, f0.g);
    /* RS: a group's close needs the next group's scales (fk_next_units), which the super-step
     * before the close sends for; loaded then, each close waits for a round trip to memory
     * before the warp can go on to its next loads. With 64-k super-steps (groups of 64 k or
     * more) they are sent when the group before opens instead (H200 back to back, block:128
     * M = 16: 3072×12288 14.69 → 14.35 µs, 3072×6144 8.76 → 8.50, M = 1 level; block:64 M = 16
     * 3–4 % faster, M = 1 from 2 % faster to 1 % slower). At 32-k super-steps (block:32) M = 1
     * lost 1–3 % (3072×12288 17.19 → 17.44), so not there. (Their lines sent to L2 before the
     * wait as well: 1–4 % slower.) */
    constexpr bool AHEAD = RS && Mma::KSS >= 64;
    const int kend = ss_hi * Mma::KSS < p.K ? ss_hi * Mma::KSS : p.K;
    FkGroupScales<Mma, NJ> ahead;
    if constexpr (AHEAD) {
        const int kn = fk_next_group(p, ss_lo * Mma::KSS);
        if (ss_lo < ss_hi && kn < kend) fk_group_scales<Mma, NJ>(ahead, p, n0, kn, lane);
    }
    fk_grid_wait();
    fk_grid_release();
    /* The V adjacent columns this thread stores: their scales and biases arrive during the main
     * loop instead of after it. The first EPI threads, a multiple of BN / V, store; where V is 1
     * all of them, which the split-K sum below relies on. */
    constexpr int EPI = W * 32 / (BN / V) * (BN / V);
    static_assert(EPI > 0 && (V > 1 || EPI == W * 32), "every storing thread keeps its columns");
    const int mycol = n0 + tid % (BN / V) * V;
    FkCol fc[V];
#pragma unroll
    for (int e = 0; e < V; e++) fc[e] = mycol + e < p.N ? fk_col(p, mycol + e) : FkCol{1.0f, 0.0f};

    /* A_LATE: the next super-step's rows of A are loaded after this one's products (and flush)
     * rather than beside its weight; the weight loads, whose latency is DRAM's, go out first
     * either way. With block scales always (H100 back to back, block:128: 1.06–1.13× faster at
     * M = 1 and 16, e.g. 8192² 27.5 → 24.3 µs); with tensor scales the one-fragment forms keep
     * the old order (0.5–1.7 % slower with it), and the M ≤ 32 kernel takes whichever order's
     * grid fills the GPU better (fk_go_skinny32). */
    if (ss_lo < ss_hi)
#pragma unroll
        for (int mi = 0; mi < MI; mi++) Mma::load_a_gmem(f0.a[mi], p, mi * 16, ss_lo * Mma::KSS, lane);
    /* Super-step ss from cur, while the next one's loads go to nxt. */
    auto step = [&](int ss, FkSkinnyFrags<Mma, MI, NJ> &cur, FkSkinnyFrags<Mma, MI, NJ> &nxt) {
        const bool closes = BLOCK && fk_group_opens(p, (ss + 1) * Mma::KSS); /* this super-step ends a group */
        if (ss + 1 < ss_hi)
            fk_skinny_load<Mma, MI, NJ, BLOCK, !A_LATE, AHEAD>(nxt, p, (ss + 1) * Mma::KSS, n0, lane, closes, cur.g,
                                                            &ahead, kend);
        if constexpr (SWAP) {
            const typename Mma::BFrag none = {};
#pragma unroll
            for (int j = 0; j < Mma::STEPS; j++)
#pragma unroll
                for (int q = 0; q < NA; q++)
                    Mma::mma_swap(cur.a[0], cur.b[2 * q], 2 * q + 1 < NJ ? cur.b[2 * q + 1 < NJ ? 2 * q + 1 : 0] : none, j,
                                  acc[0][q]);
        } else {
#pragma unroll
            for (int j = 0; j < Mma::STEPS; j++)
#pragma unroll
                for (int mi = 0; mi < MI; mi++)
#pragma unroll
                    for (int nj = 0; nj < NJ; nj++) {
                        if constexpr (BLOCK && !RS) Mma::mma(cur.a[mi], cur.b[nj], j, accg[mi][nj]);
                        else Mma::mma(cur.a[mi], cur.b[nj], j, acc[mi][nj]);
                    }
        }
        if constexpr (A_LATE) {
            if (ss + 1 < ss_hi) {
                fk_syncwarp(); /* keeps the loads after the products */
#pragma unroll
                for (int mi = 0; mi < MI; mi++) Mma::load_a_gmem(nxt.a[mi], p, mi * 16, (ss + 1) * Mma::KSS, lane);
            }
        }
        if constexpr (RS) {
            /* in units of the current group's scale (FK_SCALE_BLOCK_RS): at a group's end times
             * s_g / s_{g+1}, at the end of the run (which may stop mid-group) times s_g */
            if (ss + 1 == ss_hi) {
                fk_scale_cols<Mma, MI, NJ, SWAP>(acc, cur.g, lane);
            } else if (closes) {
                fk_next_units<Mma, MI, NJ, SWAP>(acc, cur.g, nxt.g, lane);
            }
        } else if constexpr (BLOCK) {
            /* at a group's end, and at the end of this warp's run (which may stop mid-group) */
            if (closes || ss + 1 == ss_hi) fk_flush<Mma, MI, NJ>(acc, accg, cur.g, lane);
        }
    };
    if constexpr (PAIR) {
        /* PAIR: the two sets take turns. Copied back each super-step (below), the next weight was
         * copied as soon as its loads were out, so the warp waited for them before it issued the
         * loads after those: one super-step in flight, where taking turns lets the next loads go
         * out once this super-step's products are issued. Where registers allow (with no more
         * than the copy's form: otherwise it spilled, or fewer blocks fit, and was slower). */
        int ss = ss_lo;
        for (; ss + 1 < ss_hi; ss += 2) {
            step(ss, f0, f1);
            step(ss + 1, f1, f0);
        }
        if (ss < ss_hi) step(ss, f0, f1);
    } else {
        for (int ss = ss_lo; ss < ss_hi; ss++) {
            step(ss, f0, f1);
            f0 = f1;
        }
    }

    /* Sum the W warps' partial tiles, in warp order. */
    if constexpr (SWAP) {
        /* accumulator rows are columns of Y, its columns rows of Y */
#pragma unroll
        for (int q = 0; q < NA; q++)
#pragma unroll
            for (int i = 0; i < Mma::NACC; i++)
                if (q * 16 + Mma::acc_row(lane, i) < BN) red[warp][Mma::acc_col(lane, i)][q * 16 + Mma::acc_row(lane, i)] = acc[0][q][i];
    } else {
#pragma unroll
        for (int mi = 0; mi < MI; mi++)
#pragma unroll
            for (int nj = 0; nj < NJ; nj++)
#pragma unroll
                for (int i = 0; i < Mma::NACC; i++)
                    red[warp][mi * 16 + Mma::acc_row(lane, i)][nj * Mma::TN + Mma::acc_col(lane, i)] = acc[mi][nj][i];
    }
    __syncthreads();
    const int rows = p.M < ROWS ? p.M : ROWS;
    for (int idx = tid; idx < rows * (BN / V) && tid < EPI; idx += EPI) {
        const int r = idx / (BN / V), cc = idx % (BN / V) * V, col = n0 + cc;
        if (col >= p.N) continue; /* N % 8 == 0: all V columns or none */
        float v[V];
        fk_ld_f32<V>(&red[0][r][cc], v);
#pragma unroll
        for (int w = 1; w < W; w++) {
            float t[V];
            fk_ld_f32<V>(&red[w][r][cc], t);
#pragma unroll
            for (int e = 0; e < V; e++) v[e] += t[e];
        }
#pragma unroll
        for (int e = 0; e < V; e++) {
            if (p.splits == 1) fk_store1_col(p, r, col + e, fc[e], v[e]);
            else *fk_part(p, split, r, col + e) = v[e];
        }
    }
    if (p.splits == 1 || !fk_split_last(p, blockIdx.x)) return;
    fk_split_finish<W * 32>(
        p, rows * BN,
        [&](int i, int &r, int &c) {
            r = i / BN;
            c = n0 + i % BN;
            return c < p.N;
        },
        /* i % BN is tid % BN: this thread's own column where V == 1 */
        [&](int r, int c, float v) {
            if constexpr (V == 1) fk_store1_col(p, r, c, fc[0], v);
            else fk_store1(p, r, c, v);
        });
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

/* A skinny kernel's launch: its blocks per multiprocessor (occ), K splits and tiles. */
struct FkSkinnyGrid {
    int occ, splits, ntiles;
    size_t smem; /* dynamic shared memory per block */
    hipError_t prepared;
};
template <class Mma, int MI, int NJ, int W, bool BLOCK, int MINB = 1, bool A_LATE = BLOCK, bool RS = false,
          bool PAIR = false, bool SWAP = false>
static FkSkinnyGrid fk_skinny_grid(const FkParams &p) {
    constexpr int BN = NJ * Mma::TN;
    constexpr size_t SMEM = (size_t)W * MI * 16 * (BN + 4) * sizeof(float);
    static_assert(SMEM <= FK_SMEM_FLOOR, "the warps' partial tiles fit every GPU of the build");
    auto kern = fk_gemm_skinny<Mma, MI, NJ, W, BLOCK, MINB, A_LATE, RS, PAIR, SWAP>;
    /* As many blocks as fit on the GPU at once (no second, mostly idle wave), but every warp
     * gets at least 2 super-steps. (No carveout preference: the L1 keeps A's rows for the
     * warps of a multiprocessor.) */
    static int occ;
    static hipError_t prepared;
    if (!occ) {
        prepared = fk_prepare((const void *)kern, SMEM, W * 32, false, &occ);
        if (occ < 1) occ = 1;
    }
    FkSkinnyGrid g;
    g.occ = occ;
    g.smem = SMEM;
    g.prepared = prepared;
    g.ntiles = (p.N + BN - 1) / BN;
    const int nss = (p.K + Mma::KSS - 1) / Mma::KSS;
    int splits = occ * fk_sm_count() / g.ntiles;
    int maxs = nss / (2 * W);
    if (splits > maxs) splits = maxs;
    if (splits < 1) splits = 1;
    if (g.ntiles > FK_MAX_COUNTERS) splits = 1;
    g.splits = splits;
    return g;
}

template <class Mma, int MI, int NJ, int W, bool BLOCK, int MINB = 1, bool A_LATE = BLOCK, bool RS = false,
          bool PAIR = false, bool SWAP = false>
static hipError_t fk_go_skinny(FkParams &p, hipStream_t st, size_t *ws_need, void *ws, size_t ws_bytes) {
    auto kern = fk_gemm_skinny<Mma, MI, NJ, W, BLOCK, MINB, A_LATE, RS, PAIR, SWAP>;
    if (p.M > (SWAP ? 8 : MI * 16)) return hipErrorInvalidValue;
    const FkSkinnyGrid g = fk_skinny_grid<Mma, MI, NJ, W, BLOCK, MINB, A_LATE, RS, PAIR, SWAP>(p);
    if (g.prepared != hipSuccess) return g.prepared;
    const int ntiles = g.ntiles, splits = g.splits;
    size_t need = splits > 1 ? FK_COUNTER_BYTES + (size_t)splits * p.M * p.N * sizeof(float) : 0;
    if (ws_need) {
        *ws_need = need;
        return hipSuccess;
    }
    if (need > ws_bytes || (need && !ws)) return hipErrorInvalidValue;
    p.splits = splits;
    p.count = (unsigned *)ws;
    p.part = need ? (float *)((unsigned char *)ws + FK_COUNTER_BYTES) : nullptr;
    dim3 grid(ntiles, splits);
    static int dependent = -1;
    return fk_launch_dependent(kern, dependent, grid, dim3(W * 32), g.smem, st, p);
}

/* Fill of one wave (0 where the grid takes more than one). */
static double fk_wave_fill(const FkSkinnyGrid &g) {
    const double blocks = (double)g.ntiles * g.splits, slots = (double)g.occ * fk_sm_count();
    return blocks <= slots ? blocks / slots : 0.0;
}

/* M ≤ 32: the two orders of A's loads compile to different register counts (sm_90a: 145 and
 * 120 with tensor scales, 186 and 162 with block scales), so to different blocks per
 * multiprocessor and grids. The later order, with more blocks, unless the earlier one's grid
 * fills one wave to 85 % or more and the later one's fills it less, by 5 points or more
 * (H100, M = 32, 14 shapes side by side: with tensor scales the later order is up to 1.54×
 * faster where the rule takes it, e.g. 14336×4096 37.9 → 24.6 µs, 8192² 33.9 → 28.9, and up to
 * 1.2× slower where it does not, e.g. 12288×3072 16.1 against 19.0; with block scales the rule
 * keeps 8192², 8192×28672 and 2048² 5–6 % faster in the earlier order and is 5–7 % off at
 * 14336×4096 and 13824×5120, which take the later one). */
template <class Mma, bool BLOCK>
static hipError_t fk_go_skinny32(FkParams &p, hipStream_t st, size_t *ws_need, void *ws, size_t ws_bytes) {
#if FK_FRAG_NV
    /* Up to 8 rows without block scales: one row fragment with the operands swapped (as in
     * fk_go_skinny16), the same 32-column tiles of 4 warps. H200 back to back against the two
     * row fragments, M = 1 / 8: 4096² 7.80 / 8.45 → 6.90 / 7.31 µs, 14336×4096 19.58 / 19.76 →
     * 16.25 / 16.43, 5120² 10.81 / 11.36 → 9.33 / 9.64, 13824×5120 23.95 / 24.24 → 19.77 / 19.99,
     * 28672×8192 63.50 / 65.16 → 60.51 / 61.67; 6144×4096 9.86 / 10.26 → 9.94 / 10.50. */
    if constexpr (!BLOCK) {
        if (p.M <= 8) return fk_go_skinny<Mma, 1, 4, 4, false, 1, false, false, false, true>(p, st, ws_need, ws, ws_bytes);
    }
#endif
    const double early = fk_wave_fill(fk_skinny_grid<Mma, 2, 4, 4, BLOCK, 1, false>(p));
    const double late = fk_wave_fill(fk_skinny_grid<Mma, 2, 4, 4, BLOCK, 1, true>(p));
    if (early >= 0.85 && late < early - 0.05) return fk_go_skinny<Mma, 2, 4, 4, BLOCK, 1, false>(p, st, ws_need, ws, ws_bytes);
    return fk_go_skinny<Mma, 2, 4, 4, BLOCK, 1, true>(p, st, ws_need, ws, ws_bytes);
}

/* Whether n columns in tiles of bn make one wave of per_sm blocks per multiprocessor that
 * leaves at most a tenth of the places idle. */
static bool fk_skinny_one_wave(long long n, int bn, int per_sm) {
    const long long tiles = (n + bn - 1) / bn, slots = (long long)per_sm * fk_sm_count();
    return tiles <= slots && tiles * 10 >= slots * 9;
}

/* M ≤ 16. Where the column tiles of 12, 8 or 3 fragments (96, 64 or 24 columns on NVIDIA)
 * make one wave of one block per multiprocessor, blocks of 7, 12 or 21–24 warps: each splits
 * its tile's K between its own warps and adds their sums in shared memory, with no split-K sum
 * through L2 after the loop (H100 back to back, N = 12288, 8192 and 3072: 1.02–1.25× faster
 * than the 4-warp blocks picked before). The register file bounds the warp counts (a quarter
 * of it per scheduler: 2, 3 and 5–6 warps there at the 204, 152 and 80 registers each form
 * needs); at 96 columns 7 warps were 0.5–1 % faster than 6 or 8. At 24 columns 24 warps where
 * each still gets 256 or more of K (K = 12288: 2–3 % faster than 21; K = 3072, where each gets
 * 128, 1 % slower), and where K ≤ 3072 12 warps in two blocks per multiprocessor, which split
 * K between them and add their sums through L2 (H100 back to back against 21 warps: 3072²
 * M = 1 5.29 → 5.10 µs, M = 16 5.90 → 5.55; 3072×2048 4.15 → 4.08 and 4.65 → 4.47; at K = 4096
 * and 5120 they were 4–10 % slower, and 6 warps in four blocks slower everywhere). Block
 * scales' second accumulator set and scales take 8 and 12 warps (196 and 106 registers on
 * sm_90a), 18 at 3 fragments (96 registers) where each warp gets 256 or more of
 * K (block:128, 3072×12288 back to back on the H100: 1.03–1.04× faster than 15, which was 1.06×
 * faster than 12; at K = 3072 18 and 15 warps were 1.03–1.04× slower than 12), and none at 12
 * fragments: N = 12288 takes 6 fragments (48 columns) in two blocks of 6 warps per
 * multiprocessor instead (3 warps per scheduler, 158 registers), 1.2× faster than the 4-warp
 * blocks it used before; 96 columns in 6 warps of 255 registers measured 1.15× slower.
 * On AMD (16-column fragments) only the forms that compile without scratch memory for gfx11: 8
 * and 3 fragments, and 3 with block scales; with as many warps as a workgroup's 64 KiB of LDS
 * holds partial tiles of (7 of 128 columns, 18 of 48: 58 KiB each; 12 and 21–24 warps, as on
 * NVIDIA, would take 68–99 KiB, more than gfx11 gives a workgroup). Elsewhere 4-warp blocks,
 * several per tile where the tiles are few.
 * fk_skinny16_form: the one-wave form's fragments per tile for n columns, or 0. */
#if FK_FRAG_NV
#define FK_SKINNY16_NJ 8 /* the 4-warp form's fragments per tile */
#define FK_FRAG_TN (MmaNv<4>::TN)
#else
#define FK_SKINNY16_NJ 4
#define FK_FRAG_TN (MmaAmd::TN)
#endif
struct FkSkinnyForm {
    int nj, per_sm; /* fragments per column tile, blocks per multiprocessor */
};
static int fk_skinny16_form(long long n, bool block) {
#if FK_FRAG_NV
    static const FkSkinnyForm forms[] = {{12, 1}, {8, 1}, {3, 1}, {0, 0}};
    static const FkSkinnyForm block_forms[] = {{8, 1}, {3, 1}, {6, 2}, {0, 0}};
#else
    static const FkSkinnyForm forms[] = {{8, 1}, {3, 1}, {0, 0}}, block_forms[] = {{3, 1}, {0, 0}};
#endif
    for (const FkSkinnyForm *f = block ? block_forms : forms; f->nj; f++)
        if (fk_skinny_one_wave(n, f->nj * FK_FRAG_TN, f->per_sm)) return f->nj;
    return 0;
}
/* One wave's fill by the 4-warp skinny16 blocks without block scales (0: more than a wave). */
static double fk_skinny16_fill(const FkParams &p) {
#if FK_FRAG_NV
    return fk_wave_fill(fk_skinny_grid<MmaNv<4>, 1, FK_SKINNY16_NJ, 4, false>(p));
#else
    return fk_wave_fill(fk_skinny_grid<MmaAmd, 1, FK_SKINNY16_NJ, 4, false>(p));
#endif
}
template <class Mma, bool BLOCK, bool RS = false, bool SWAP = false>
static hipError_t fk_go_skinny16(FkParams &p, hipStream_t st, size_t *ws_need, void *ws, size_t ws_bytes) {
#if FK_FRAG_NV
    /* Up to 8 rows: the same forms with the product's operands swapped (SWAP in
     * fk_gemm_skinny: the weight as the 16-row operand, so that one instruction takes 16 columns
     * instead of 8, half the instructions; 50 fewer registers at 96 columns). H200 back to back,
     * M = 1 / 8: 12288×3072 11.41 / 11.63 → 10.24 / 10.40 µs, 8192² 17.36 / 17.78 → 16.34 /
     * 16.59, 3072×12288 10.88 / 11.26 → 10.56 / 10.88, 3072² 4.43 / 4.64 → 4.27 / 4.48. With
     * block scales only in units of the current group (RS below: one accumulator set, the
     * group scales following the accumulators' rows, fk_frag_cols): H200 back to back, M = 1 / 8,
     * block:128 3072×12288 13.61 / 13.86 → 12.43 / 12.70, 8192² 19.93 / 20.19 → 18.43 / 18.67;
     * block:64 and block:32 6–13 % there. The two-set forms swapped (scales and second set
     * per swapped tile) lost: block:128 14336×4096 19.29 → 24.63, 12288×3072 11.61 → 12.39. */
    if constexpr (!SWAP && (!BLOCK || RS)) {
        if (p.M <= 8) return fk_go_skinny16<Mma, BLOCK, RS, true>(p, st, ws_need, ws, ws_bytes);
    }
    if constexpr (RS) {
        /* Block scales in units of the current group (FK_SCALE_BLOCK_RS): no second accumulator
         * set, so the 64- and 24-column tiles take as many warps as with tensor scales (12 and
         * 24, at 151 and 80 registers on sm_90a, against 8 and 18). H100 back to back, block:128,
         * M = 1 / 16 against the two-set forms: 8192² 23.83 / 25.10 → 23.25 / 24.16 µs,
         * 3072×12288 14.79 / 16.07 → 14.18 / 15.38, 3072×6144 8.61 / 9.51 → 8.48 / 9.35;
         * block:32 6–8 %. Not elsewhere: the 96-column tiles of 7 warps lost 3 % to the
         * two-set 48-column tiles at N = 12288, 12 warps at 24 columns and K = 3072 1 %, and the
         * 4-warp blocks of 64 columns 7–27 % at 4096² and 14336×4096 (where those of 32 columns
         * won, below). The 24-column form loads the next super-step's rows of A beside its
         * weight (not A_LATE) where its super-steps are of 32 or 16 k (block:32, block:16), which
         * fits its 80 registers there: H100 back to back,
         * 3072×12288 M = 16 block:32 19.52 → 18.44 µs, block:16 30.80 → 29.24, single calls up
         * to 1.25× faster; at 64 k it spilled 20 bytes and was 7 % slower. The 64-column form
         * likewise at 32 k (block:32 8192² M = 16 28.61 → 27.26 µs, single call 42.6 → 34.0),
         * not at 16 k (8192² 39.46 → 39.76) or 64 k (level). */
        const int f = fk_skinny16_form(p.N, false);
        if (f == 8) return fk_go_skinny<Mma, 1, 8, 12, true, 1, (Mma::KSS != 32), true, false, SWAP>(p, st, ws_need, ws, ws_bytes);
        if (f == 3 && p.K >= 24 * 256) return fk_go_skinny<Mma, 1, 3, 24, true, 1, (Mma::KSS > 32), true, false, SWAP>(p, st, ws_need, ws, ws_bytes);
        /* Where the two-set forms take 48-column tiles in two blocks of 6 warps per
         * multiprocessor (N = 12288 on 132), the same tiles with one set, from 64-k super-steps
         * (block:64 and coarser). Back to back, M = 1 / 8 / 16, block:128 12288×3072: H100 13.57 /
         * 13.96 / 14.50 → 13.20 / 13.57 / 14.35 µs, H200 11.63 / 12.16 / 13.56 → 10.92 / 11.41 /
         * 13.12; 12288×4096 alike; block:64 H100 2–3 %, H200 9–10 % at M ≤ 8 and 3 % at 16. At
         * 32 k (block:32, A's rows loaded early) M = 16 lost 25 % (H100 12288×3072 17.45 →
         * 21.84), and 9 warps instead of 6 lost up to 40 % at M = 16. */
        if constexpr (Mma::KSS >= 64) {
            if (fk_skinny16_form(p.N, true) == 6) return fk_go_skinny<Mma, 1, 6, 6, true, 2, true, true, false, SWAP>(p, st, ws_need, ws, ws_bytes);
        }
        /* Where the two-set forms would take 4-warp blocks: the same blocks with one set, in 32-
         * or 64-column tiles (swapped at M ≤ 8: 101 and 138 registers on sm_90a at 64-k
         * super-steps, so 4 and 3 blocks per multiprocessor). At 64-k super-steps the 64-column
         * tiles where their grid fills a wave by 5 points more, else the 32-column ones; at 32 k
         * (block:32) the 64-column ones. H200 back to back against the two-set blocks, M = 1 / 16,
         * block:128: 4096² 8.40 / 10.40 → 7.16 / 9.02 µs, 14336×4096 19.32 / 22.82 → 16.50 /
         * 20.87, 4096×14336 19.37 / 23.44 → 16.94 / 21.04, 4096×11008 15.88 / 19.34 → 13.77 /
         * 17.28 (32 columns), 11008×4096 19.20 / 22.77 → 13.80 / 18.65, 6144×4096 12.41 / 15.14
         * → 9.11 / 12.35 (64 columns); block:64 alike; block:32 14336×4096 34.20 / 34.01 → 24.76
         * / 27.27, 11008×4096 20.17 / 22.42 → 17.67 / 20.00, but 6144×4096 11.90 / 13.78 →
         * 11.05 / 14.84. H100 at M = 1: 5–19 % at block:128 (4096² 8.93 → 7.97), block:32 up to
         * 24 % (14336×4096 33.88 → 25.72), 6144×4096 3 % slower (12.32 → 12.65). (Unmeasured at
         * 16-k super-steps, block:16: not there.) */
        if constexpr (Mma::KSS >= 32) {
            if (!fk_skinny16_form(p.N, true)) {
                if constexpr (Mma::KSS >= 64) {
                    const double w32 = fk_wave_fill(fk_skinny_grid<Mma, 1, 4, 4, true, 1, true, true, false, SWAP>(p));
                    const double w64 = fk_wave_fill(fk_skinny_grid<Mma, 1, 8, 4, true, 1, true, true, false, SWAP>(p));
                    if (w64 < w32 + 0.05) return fk_go_skinny<Mma, 1, 4, 4, true, 1, true, true, false, SWAP>(p, st, ws_need, ws, ws_bytes);
                }
                return fk_go_skinny<Mma, 1, 8, 4, true, 1, (Mma::KSS != 32), true, false, SWAP>(p, st, ws_need, ws, ws_bytes);
            }
        }
    }
#endif
    switch (fk_skinny16_form(p.N, BLOCK)) {
#if FK_FRAG_NV
    case 12:
        if constexpr (!BLOCK) return fk_go_skinny<Mma, 1, 12, 7, false, 1, false, false, true, SWAP>(p, st, ws_need, ws, ws_bytes);
        break;
#endif
    case 8:
#if FK_FRAG_NV
        if constexpr (!BLOCK) return fk_go_skinny<Mma, 1, 8, 12, false, 1, false, false, true, SWAP>(p, st, ws_need, ws, ws_bytes);
        else return fk_go_skinny<Mma, 1, 8, 8, true>(p, st, ws_need, ws, ws_bytes);
#else
        if constexpr (!BLOCK) return fk_go_skinny<Mma, 1, 8, 7, false>(p, st, ws_need, ws, ws_bytes);
#endif
        break;
#if FK_FRAG_NV
    case 6:
        if constexpr (BLOCK) return fk_go_skinny<Mma, 1, 6, 6, true, 2>(p, st, ws_need, ws, ws_bytes);
        break;
#endif
    case 3:
        if constexpr (BLOCK) {
            if (p.K >= 18 * 256) return fk_go_skinny<Mma, 1, 3, 18, true>(p, st, ws_need, ws, ws_bytes);
            return fk_go_skinny<Mma, 1, 3, 12, true>(p, st, ws_need, ws, ws_bytes);
        }
#if FK_FRAG_NV
        else if (p.K >= 24 * 256) return fk_go_skinny<Mma, 1, 3, 24, false, 1, false, false, false, SWAP>(p, st, ws_need, ws, ws_bytes);
        else if (p.K > 3072) return fk_go_skinny<Mma, 1, 3, 21, false, 1, false, false, false, SWAP>(p, st, ws_need, ws, ws_bytes);
        else return fk_go_skinny<Mma, 1, 3, 12, false, 1, false, false, true, SWAP>(p, st, ws_need, ws, ws_bytes);
#else
        else if (p.K > 3072) return fk_go_skinny<Mma, 1, 3, 18, false>(p, st, ws_need, ws, ws_bytes);
        else return fk_go_skinny<Mma, 1, 3, 12, false>(p, st, ws_need, ws, ws_bytes);
#endif
    }
#if FK_FRAG_NV
    /* The 4-warp blocks load the next super-step's rows of A beside its weight at 32-k
     * super-steps (block:32), as the one-wave forms above: H100 back to back, M = 1 / 16,
     * 4096² 10.31 / 12.81 → 10.12 / 12.06 µs, 14336×4096 33.60 / 36.30 → 33.85 / 33.78 (H200:
     * 12.50 → 11.89 and 37.06 → 33.97 at M = 16, M = 1 within 3 %); at 16 k
     * (block:16) mixed (14336×4096 36.45 / 45.19 → 34.67 / 48.00), so later there. */
    return fk_go_skinny<Mma, 1, FK_SKINNY16_NJ, 4, BLOCK, 1, BLOCK && Mma::KSS != 32, false, false, SWAP && !BLOCK>(p, st, ws_need, ws, ws_bytes);
#else
    return fk_go_skinny<Mma, 1, FK_SKINNY16_NJ, 4, BLOCK>(p, st, ws_need, ws, ws_bytes);
#endif
}

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
template <int BNA, int STAGES, int NWG, bool BLOCK>
static hipError_t fk_go_wgws(FkParams &p, hipStream_t st, size_t *ws_need) {
    typedef FkWsTile<BNA, STAGES, NWG, BLOCK> Tile;
    if (fk_compute_capability() != 90) return hipErrorInvalidValue;
    if (ws_need) {
        *ws_need = 0;
        return hipSuccess;
    }
    CUtensorMap ta, tw;
    if (Tile::SMEM > fk_smem_limit() || !fk_ws_maps<BNA, Tile::HROWS>(p, &ta, &tw)) return hipErrorNotSupported;
    auto kern = [] {
        if constexpr (NWG == 3) return fk_gemm_wgws3<BNA, STAGES, BLOCK>;
        else return fk_gemm_wgws<BNA, STAGES, BLOCK>;
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
template <int BNA, int STAGES, bool BLOCK>
static hipError_t fk_go_wgsk(FkParams &p, hipStream_t st, size_t *ws_need, void *ws, size_t ws_bytes) {
    typedef FkWsTile<BNA, STAGES, 2, BLOCK> Tile;
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
        if constexpr (BLOCK) return fk_gemm_wgsk_block<BNA, STAGES>;
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
    case FK_VARIANT_SKINNY32: return fk_go_skinny32<Mma, BLOCK>(p, st, ws_need, ws, ws_bytes);
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
    /* the wgmma kernels: block groups must be whole 64-k chunks */
    case FK_VARIANT_WS128:
        if constexpr (Mma::KSS == 64) return fk_go_wgws<128, 8, 2, BLOCK>(p, st, ws_need);
        else return hipErrorInvalidValue;
    case FK_VARIANT_WS64:
        if constexpr (Mma::KSS == 64) return fk_go_wgws<64, 10, 2, BLOCK>(p, st, ws_need);
        else return hipErrorInvalidValue;
    case FK_VARIANT_SK128:
        if constexpr (Mma::KSS == 64) return fk_go_wgsk<128, 8, BLOCK>(p, st, ws_need, ws, ws_bytes);
        else return hipErrorInvalidValue;
    case FK_VARIANT_SK64:
        if constexpr (Mma::KSS == 64) return fk_go_wgsk<64, 10, BLOCK>(p, st, ws_need, ws, ws_bytes);
        else return hipErrorInvalidValue;
    case FK_VARIANT_WS192:
        /* block scales: in units of the current group where the caller allows it, else ws128
         * (no room for a second accumulator set) */
        if constexpr (Mma::KSS == 64 && !BLOCK) return fk_go_wgws<128, 7, 3, false>(p, st, ws_need);
        else if constexpr (Mma::KSS == 64)
            return rescale ? fk_go_wgws<128, 7, 3, true>(p, st, ws_need) : fk_go_wgws<128, 8, 2, true>(p, st, ws_need);
        else return hipErrorInvalidValue;
    case FK_VARIANT_WS256:
        /* block scales: in units of the current group where the caller allows it, else ws128
         * (no room for a second set of 128 accumulators); sk256 likewise with sk128 */
        if constexpr (Mma::KSS == 64 && !BLOCK) return fk_go_wgws<256, 5, 2, false>(p, st, ws_need);
        else if constexpr (Mma::KSS == 64)
            return rescale ? fk_go_wgws<256, 5, 2, true>(p, st, ws_need) : fk_go_wgws<128, 8, 2, true>(p, st, ws_need);
        else return hipErrorInvalidValue;
    case FK_VARIANT_SK256:
        if constexpr (Mma::KSS == 64 && !BLOCK) return fk_go_wgsk<256, 5, false>(p, st, ws_need, ws, ws_bytes);
        else if constexpr (Mma::KSS == 64)
            return rescale ? fk_go_wgsk<256, 5, true>(p, st, ws_need, ws, ws_bytes)
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

/*
 * The skinny kernel (M ≤ 32, gemm.hip's header says how it works) and its launch forms: the
 * grid of a form, the M ≤ 32 and M ≤ 16 form choices and the measurements behind them. Part
 * of gemm.hip, included once where the block-scale helpers and the host's launch helpers it
 * uses are defined; not a header of its own.
 */
#ifndef FK_GEMM_SKINNY_H
#define FK_GEMM_SKINNY_H

/* One super-step's operands and, with block scales, its group's scales. */
template <class Mma, int MI, int NJ>
struct FkSkinnyFrags {
    typename Mma::AFrag a[MI];
    typename Mma::BFrag b[NJ];
    FkGroupScales<Mma, NJ> g;
};

/* A warp's block scales for its whole run of K, copied to shared memory before the loop (w:
 * column c's scale for group g0 + i at w[c * str + i]; str odd, so that a warp's reads of one
 * group fall in distinct banks), or none (w null: each group's scales from global memory).
 * The scales are stored by column, so one group's scales for a tile's columns lie one row of
 * K/G apart, a 32-byte sector each; read group by group in the loop, every load instruction
 * touched 32 sectors. */
struct FkScaleWin {
    const float *w;
    int str, g0;
};

/* The group scales at k, from the window where there is one. */
template <class Mma, int NJ>
__device__ __forceinline__ void fk_win_scales(FkGroupScales<Mma, NJ> &g, const FkParams &p, const FkScaleWin &win,
                                              int n0, int k, int lane) {
    typedef FkGroupScales<Mma, NJ> G;
    if (!win.w) {
        fk_group_scales<Mma, NJ>(g, p, n0, k, lane);
        return;
    }
    const int gi = fk_group_of(p, k) - win.g0;
#pragma unroll
    for (int i = 0; i < G::SPL; i++)
        g.s[i] = G::holds(lane, i) ? win.w[(lane + 32 * i) * win.str + gi] : 0.0f;
}

/* The super-step at kbase (its rows of A unless LOAD_A is false); its group's scales where it
 * opens a group (open), else the previous super-step's (prev). With AHEAD the opening group's
 * scales are those loaded one group earlier (*ahead), and *ahead is sent for the group after
 * it where that starts before kend. */
template <class Mma, int MI, int NJ, bool BLOCK, bool LOAD_A = true, bool AHEAD = false>
__device__ __forceinline__ void fk_skinny_load(FkSkinnyFrags<Mma, MI, NJ> &f, const FkParams &p, int kbase, int n0,
                                               int lane, bool open, const FkGroupScales<Mma, NJ> &prev,
                                               const FkScaleWin &win, FkGroupScales<Mma, NJ> *ahead = nullptr,
                                               int kend = 0) {
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
            if (kn < kend) fk_win_scales<Mma, NJ>(*ahead, p, win, n0, kn, lane);
        } else {
            fk_win_scales<Mma, NJ>(f.g, p, win, n0, kbase, lane);
        }
    }
}

/* The swapped product's second fragment of pair q: fragment 2q + 1, or zeros for the last pair
 * of an odd NJ (the index is taken modulo NJ only to stay in bounds where it is not used). */
template <class Mma, int NJ>
__device__ __forceinline__ typename Mma::BFrag fk_swap_second(const typename Mma::BFrag (&b)[NJ], int q) {
    return 2 * q + 1 < NJ ? b[(2 * q + 1) % NJ] : typename Mma::BFrag{};
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

/* The sums after the loop take V adjacent columns per thread where the tile is wide: at 96 columns
 * and 6 warps, one column each made 8 rounds of dependent loads and stores at M = 16, all of it
 * after the weight's last bytes had arrived; at 48 columns and 6 warps 4 rounds (H100 back to
 * back, M = 16, block:128 12288×3072 14.12 → 13.91 µs, 12288×4096 18.33 → 18.09; block:64 and
 * block:32 1 %). Not with two A fragments, whose registers are short (gfx1100 spilled with block
 * scales). */
__host__ __device__ constexpr int fk_skinny_v(int MI, int BN) { return MI == 1 && BN >= 48 ? 4 : 1; }

/* The row stride, in floats, of the warps' partial tiles (red[W][ROWS][LDR]). With one column per
 * thread a warp's 32 consecutive elements cross rows where BN is not a multiple of 32: dense rows
 * keep them in 32 distinct banks, where BN + 4 made every load a 2-way conflict (H100 back to back,
 * 24 columns, 3072×12288 M = 16: tensor scales 14.25 → 14.14 µs, block:128 15.20 → 15.07; the sums
 * after the last loop 0.52 → 0.39 µs by clock64). The accumulators' writes then conflict instead,
 * but only the last warp's are on the path. Elsewhere BN + 4: those writes fall in distinct banks,
 * and rows stay 16-byte aligned for V = 4. */
__host__ __device__ constexpr int fk_skinny_ldr(int MI, int BN) { return fk_skinny_v(MI, BN) == 1 && BN % 32 != 0 ? BN : BN + 4; }

template <class Mma, int MI, int NJ, int W, bool BLOCK, int MINB = 1, bool A_LATE = BLOCK, bool RS = false,
          bool PAIR = false, bool SWAP = false>
__global__ void __launch_bounds__(W * 32, MINB) fk_gemm_skinny(FkParams p) {
    constexpr int BN = NJ * Mma::TN, ROWS = MI * 16, LDR = fk_skinny_ldr(MI, BN);
    /* SWAP (M <= 8, NVIDIA; tensor or channel scales, or block scales in units of the current
     * group): the weight is the product's 16-row operand and A the 8-column one, so that one
     * instruction takes two fragments' columns (NA of them). */
    static_assert(!SWAP || (MI == 1 && (!BLOCK || RS)), "the swapped product: one row fragment, one accumulator set");
    constexpr int NA = FkAccTiles<NJ, SWAP>::N;
    constexpr int V = fk_skinny_v(MI, BN);
    extern __shared__ float fk_red[]; /* [W][ROWS][LDR] */
    auto red = reinterpret_cast<float (*)[ROWS][LDR]>(fk_red);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n0 = blockIdx.x * BN, split = blockIdx.y;
    /* Super-steps are dealt out as contiguous runs, one per warp of every block of the tile
     * (ss_lo … ss_hi - 1). In the swapped 24- and 48-column forms with tensor or channel scales
     * (ILV) warp seg takes seg, seg + nseg, … instead, so that the warps read one band of K that
     * moves through the weight rather than each its own run. Back to back, M = 1 / 8, H100:
     * 3072² 4.63 / 4.68 → 4.40 / 4.52 µs, 3072×12288 13.14 / 13.43 → 12.85 / 13.20, 12288×3072
     * 12.39 / 12.71 → 12.27 / 12.56; H200 3072² 4.25 / 4.45 → 4.11 / 4.30, 3072×12288 10.52 /
     * 10.73 → 10.36 / 10.62. Not unswapped (M = 9…16 up to 2 % slower on both cards, e.g. H200
     * 12288×3072 10.90 → 11.14), nor in the 64-column and 4-warp forms (level to 4 % slower,
     * H100 14336×4096 M = 1 20.40 → 21.03), nor in runs of two super-steps (slower than one). */
    constexpr bool ILV = SWAP && !BLOCK && (NJ == 3 || NJ == 6);
    const int nss = (p.K + Mma::KSS - 1) / Mma::KSS;
    const int seg = split * W + warp, nseg = p.splits * W;
    const int ss_lo = (int)((long long)seg * nss / nseg), ss_hi = (int)((long long)(seg + 1) * nss / nseg);
    /* this warp's first super-step, the bound of its super-steps and the distance between them */
    const int ss_beg = ILV ? seg : ss_lo, ss_lim = ILV ? nss : ss_hi, ss_step = ILV ? nseg : 1;

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
        /* the contiguous runs keep their own loop: written as the one below, it compiled the
         * swapped 32-column form to 96 registers instead of 100, which changed its blocks per
         * multiprocessor and its times by -18 to +9 % with the shape */
        if constexpr (!ILV) {
            for (int i = lane; i < kbn * LINES; i += 32)
                if ((i % LINES) * 128 < bytes) fk_prefetch_l2(p.Q + ((size_t)(kb0 + i / LINES) * p.N + n0) * 16 + (i % LINES) * 128);
        } else {
            constexpr int KR = Mma::KSS / 16; /* K/16 rows per super-step */
            for (int i = lane; i < FK_SKINNY_WARM * KR * LINES; i += 32) {
                const int ss = ss_beg + i / (KR * LINES) * ss_step, kb = ss * KR + i / LINES % KR;
                if (ss < ss_lim && kb < p.K / 16 && (i % LINES) * 128 < bytes)
                    fk_prefetch_l2(p.Q + ((size_t)kb * p.N + n0) * 16 + (i % LINES) * 128);
            }
        }
    }
    const int kend = ss_hi * Mma::KSS < p.K ? ss_hi * Mma::KSS : p.K;
    FkScaleWin win = {nullptr, 0, 0};
    FkSkinnyFrags<Mma, MI, NJ> f0, f1;
    if (ss_beg < ss_lim) fk_skinny_load<Mma, MI, NJ, BLOCK, false>(f0, p, ss_beg * Mma::KSS, n0, lane, true, f0.g, win);
    /* WIN: this warp's part of red (unused until the sums after the loop) holds its scales'
     * window (FkScaleWin) where the run's groups fit; copied while the first weight loads are
     * out. In the 4-warp and the 12-warp 64-column rescaling forms. H200 back to back, M = 1 /
     * 16: block:32 14336×4096 24.63 / 27.10 → 20.44 / 22.49 µs, 11008×4096 17.56 / 20.01 →
     * 15.56 / 17.72, 4096×14336 20.37 / 25.40 → 18.66 / 22.06; block:64 8192² 19.95 / 23.60 →
     * 18.71 / 22.67, 11008×4096 15.02 / 20.01 → 14.04 / 19.07; block:128 14336×4096 M = 16
     * 20.70 → 19.80, 8192² level, 6144×4096 M = 1 2 % slower; single calls level. Not in the
     * 24-column form of 24 warps at its 80-register cap (block:128 3072×12288 M = 16 14.37 →
     * 14.77) or the 48-column one (12288×3072 13.12 → 13.32). Copied with plain loads and
     * stores instead of asynchronous copies, each warp waited for its loads before its first
     * weight loads went out: single calls 1–2.5 µs slower. Not at 4 blocks per multiprocessor
     * (the M ≤ 32 kernel's two row fragments, fk_go_skinny32): with the window its 128 registers
     * spilled 24 bytes, and without it the form is faster (H100 back to back, block:128, M = 17 /
     * 32: 8192² 29.97 / 33.21 → 29.15 / 31.11 µs, 13824×5120 31.57 / 35.87 → 30.74 / 33.37,
     * 28672×8192 98.72 / 107.97 → 95.48 / 102.76). */
    constexpr bool WIN = RS && ((W == 4 && MINB == 1) || (W == 12 && NJ == 8));
    if constexpr (WIN) {
        if (ss_lo < ss_hi) {
            const int g0 = fk_group_of(p, ss_lo * Mma::KSS), ng = fk_group_of(p, kend - 1) - g0 + 1, str = ng | 1;
            if (BN * str <= ROWS * LDR) {
                float *w = &red[warp][0][0];
                const int dq = 32 / ng, dr = 32 % ng;
                int c = lane / ng, gi = lane % ng;
                for (int t = lane; t < BN * ng; t += 32) {
                    fk_copy<4>(w + c * str + gi, p.S + (size_t)(n0 + c) * p.gpr + g0 + gi, n0 + c < p.N);
                    c += dq;
                    gi += dr;
                    if (gi >= ng) {
                        gi -= ng;
                        c++;
                    }
                }
                fk_copy_commit();
                fk_copy_wait<0>();
                fk_syncwarp();
                win = {w, str, g0};
            }
        }
    }
    /* RS: a group's close needs the next group's scales (fk_next_units), which the super-step
     * before the close sends for; loaded then, each close waits for a round trip to memory
     * before the warp can go on to its next loads. With 64-k super-steps (groups of 64 k or
     * more) they are sent when the group before opens instead (H200 back to back, block:128
     * M = 16: 3072×12288 14.69 → 14.35 µs, 3072×6144 8.76 → 8.50, M = 1 level; block:64 M = 16
     * 3–4 % faster, M = 1 from 2 % faster to 1 % slower). At 32-k super-steps (block:32) M = 1
     * lost 1–3 % (3072×12288 17.19 → 17.44), so not there. (Their lines sent to L2 before the
     * wait as well: 1–4 % slower.) */
    constexpr bool AHEAD = RS && Mma::KSS >= 64;
    FkGroupScales<Mma, NJ> ahead;
    if constexpr (AHEAD) {
        const int kn = fk_next_group(p, ss_lo * Mma::KSS);
        if (kn < kend) fk_win_scales<Mma, NJ>(ahead, p, win, n0, kn, lane); /* none for an empty run: kend <= kn */
    }
    /* The V adjacent columns this thread stores: their scales and biases arrive during the main
     * loop instead of after it. The first EPI threads, a multiple of BN / V, store; where V is 1
     * all of them, which the split-K sum below relies on. The scales, like the weight, before the
     * wait (H100 back to back, M = 16, 3072×12288: channel scales 14.11 → 13.97 µs, tensor 14.09
     * → 13.98; 8192² M = 1 1 %; elsewhere level). Not the bias: it may be what the product before
     * this one wrote. */
    constexpr int EPI = W * 32 / (BN / V) * (BN / V);
    static_assert(EPI > 0 && (V > 1 || EPI == W * 32), "every storing thread keeps its columns");
    const int mycol = n0 + tid % (BN / V) * V;
    FkCol fc[V];
#pragma unroll
    for (int e = 0; e < V; e++) fc[e] = FkCol{mycol + e < p.N ? fk_col_scale(p, mycol + e) : 1.0f, 0.0f};
    fk_grid_wait();
    fk_grid_release();
#pragma unroll
    for (int e = 0; e < V; e++)
        if (mycol + e < p.N) fc[e].b = fk_col_bias(p, mycol + e);

    /* A_LATE: the next super-step's rows of A are loaded after this one's products (and flush)
     * rather than beside its weight; the weight loads, whose latency is DRAM's, go out first
     * either way. With block scales in the two-set forms (H100 back to back, block:128:
     * 1.06–1.13× faster at M = 1 and 16, e.g. 8192² 27.5 → 24.3 µs) and in the rescaling forms
     * where registers are short (fk_go_skinny16); with tensor scales the one-fragment forms keep
     * the old order (0.5–1.7 % slower with it), and the M ≤ 32 kernel takes whichever order's
     * grid fills the GPU better (fk_go_skinny32). */
    if (ss_beg < ss_lim)
#pragma unroll
        for (int mi = 0; mi < MI; mi++) Mma::load_a_gmem(f0.a[mi], p, mi * 16, ss_beg * Mma::KSS, lane);
    /* Super-step ss from cur, while the next one's loads go to nxt. */
    auto step = [&](int ss, FkSkinnyFrags<Mma, MI, NJ> &cur, FkSkinnyFrags<Mma, MI, NJ> &nxt) {
        const bool closes = BLOCK && fk_group_opens(p, (ss + 1) * Mma::KSS); /* this super-step ends a group */
        if (ss + ss_step < ss_lim)
            fk_skinny_load<Mma, MI, NJ, BLOCK, !A_LATE, AHEAD>(nxt, p, (ss + ss_step) * Mma::KSS, n0, lane, closes, cur.g,
                                                            win, &ahead, kend);
        if constexpr (SWAP) {
#pragma unroll
            for (int j = 0; j < Mma::STEPS; j++)
#pragma unroll
                for (int q = 0; q < NA; q++)
                    Mma::mma_swap(cur.a[0], cur.b[2 * q], fk_swap_second<Mma, NJ>(cur.b, q), j, acc[0][q]);
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
            if (ss + ss_step < ss_lim) {
                fk_syncwarp(); /* keeps the loads after the products */
#pragma unroll
                for (int mi = 0; mi < MI; mi++) Mma::load_a_gmem(nxt.a[mi], p, mi * 16, (ss + ss_step) * Mma::KSS, lane);
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
        int ss = ss_beg;
        for (; ss + ss_step < ss_lim; ss += 2 * ss_step) {
            step(ss, f0, f1);
            step(ss + ss_step, f1, f0);
        }
        if (ss < ss_lim) step(ss, f0, f1);
    } else {
        for (int ss = ss_beg; ss < ss_lim; ss += ss_step) {
            step(ss, f0, f1);
            f0 = f1;
        }
    }

    /* Sum the W warps' partial tiles, in warp order. */
    if constexpr (WIN) fk_syncwarp(); /* every lane's last read of the window before red[warp] is written */
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
    constexpr size_t SMEM = (size_t)W * MI * 16 * fk_skinny_ldr(MI, BN) * sizeof(float);
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

#if FK_FRAG_NV
/* Whether grid b runs more blocks than grid a, or the same in fewer waves. */
static bool fk_grid_gains(const FkSkinnyGrid &a, const FkSkinnyGrid &b) {
    const long long ba = (long long)a.ntiles * a.splits, bb = (long long)b.ntiles * b.splits;
    const long long sa = (long long)a.occ * fk_sm_count(), sb = (long long)b.occ * fk_sm_count();
    return bb > ba || (bb + sb - 1) / sb < (ba + sa - 1) / sa;
}
/* Weights of 16 M bytes or more, where the M ≤ 32 kernel's rules for blocks per multiprocessor
 * below were measured to hold; the 4 MB ones (2048², 1024×4096, each warp 2 super-steps) went
 * the other way. */
static bool fk_skinny32_large(const FkParams &p) { return (long long)p.N * p.K >= (16ll << 20); }
#endif

/* M ≤ 32: the two orders of A's loads compile to different register counts (sm_90a: 145 and
 * 120 with tensor scales, 186 and 162 with block scales), so to different blocks per
 * multiprocessor and grids. The later order, with more blocks, unless the earlier one's grid
 * fills one wave to 85 % or more and the later one's fills it less, by 5 points or more
 * (H100, M = 32, 14 shapes side by side: with tensor scales the later order is up to 1.54×
 * faster where the rule takes it, e.g. 14336×4096 37.9 → 24.6 µs, 8192² 33.9 → 28.9, and up to
 * 1.2× slower where it does not, e.g. 12288×3072 16.1 against 19.0; with block scales the rule
 * keeps 8192², 8192×28672 and 2048² 5–6 % faster in the earlier order and is 5–7 % off at
 * 14336×4096 and 13824×5120, which take the later one). */
template <class Mma, bool BLOCK, bool RS = false>
static hipError_t fk_go_skinny32(FkParams &p, hipStream_t st, size_t *ws_need, void *ws, size_t ws_bytes) {
#if FK_FRAG_NV
    /* Up to 8 rows without block scales: one row fragment with the operands swapped (as in
     * fk_go_skinny16), the same 32-column tiles of 4 warps. H200 back to back against the two
     * row fragments, M = 1 / 8: 4096² 7.80 / 8.45 → 6.90 / 7.31 µs, 14336×4096 19.58 / 19.76 →
     * 16.25 / 16.43, 5120² 10.81 / 11.36 → 9.33 / 9.64, 13824×5120 23.95 / 24.24 → 19.77 / 19.99,
     * 28672×8192 63.50 / 65.16 → 60.51 / 61.67; 6144×4096 9.86 / 10.26 → 9.94 / 10.50. */
    if constexpr (!BLOCK) {
        if (p.M <= 8) {
            /* 7 blocks per multiprocessor (71 registers on sm_90a) instead of 4 (100) where 4
             * would split K fewer than 3 ways and 7 split it more: more of the weight in flight
             * per multiprocessor. Back to back, M = 1 / 8, H100: 9216×3072 12.78 / 13.00 →
             * 10.65 / 11.02 µs, 14336×4096 20.39 / 20.27 → 19.31 / 19.75, 6144×4096 11.40 /
             * 11.71 → 10.65 / 11.05, 13824×5120 25.02 / 24.92 → 23.41 / 24.05; H200 11.43 /
             * 11.85 → 9.05 / 9.47, 16.04 / 16.22 → 14.76 / 15.40, 9.94 / 10.39 → 9.09 / 9.54,
             * 19.45 / 19.69 → 17.64 / 18.44. Not where 4 blocks split K 3 ways or more: 7 blocks
             * everywhere (the fewer registers' code is slower per warp) lost there, H200 4096²
             * 6.98 → 7.83, 4608×3072 6.57 → 6.74, 5120² 9.24 → 9.33. */
            const int s4 = fk_skinny_grid<Mma, 1, 4, 4, false, 1, false, false, false, true>(p).splits;
            if (s4 < 3 && fk_skinny_grid<Mma, 1, 4, 4, false, 6, false, false, false, true>(p).splits > s4)
                return fk_go_skinny<Mma, 1, 4, 4, false, 6, false, false, false, true>(p, st, ws_need, ws, ws_bytes);
            return fk_go_skinny<Mma, 1, 4, 4, false, 1, false, false, false, true>(p, st, ws_need, ws, ws_bytes);
        }
    }
#endif
    /* the earlier order where its grid fills one wave to 85 % or more and the other form's
     * fills it less by 5 points (the other form: one row fragment at 9–16 rows on NVIDIA
     * without block scales, below; else the later order) */
    const FkSkinnyGrid eg = fk_skinny_grid<Mma, 2, 4, 4, BLOCK, 1, false, RS>(p);
    const FkSkinnyGrid later = fk_skinny_grid<Mma, 2, 4, 4, BLOCK, 1, true, RS>(p);
    const double early = fk_wave_fill(eg);
    auto early_fills = [early](double other) { return early >= 0.85 && other < early - 0.05; };
#if FK_FRAG_NV
    static_assert(!RS || (BLOCK && Mma::KSS >= 32), "units of the current group: block scales, 32-k super-steps or more");
    if constexpr (RS && Mma::KSS == 32) {
        /* 32-k super-steps (block:32): one set takes 4 blocks per multiprocessor in both orders
         * (128 and 106 registers on sm_90a), the sets per group 3 (140 and 130). The one set
         * where its grid runs more blocks or fewer waves and the weight is 16 M bytes or more;
         * elsewhere it lost. H100 back to back, block:32, M = 17 / 32, against the sets per
         * group: 8192² 56.92 / 60.16 → 36.16 / 38.25 µs, 14336×4096 50.74 / 55.45 → 33.24 /
         * 34.75, 28672×8192 148.71 / 161.08 → 128.46 / 143.58, 4096² 13.93 / 14.59 → 12.50 /
         * 13.38, 3072×12288 25.23 / 26.23 → 24.43 / 25.47; where the grid is the same 1.07–1.11×
         * slower (12288×3072 23.31 / 24.02 → 25.01 / 26.33, 6144×4096 18.21 / 19.63 → 20.12 /
         * 21.79), and with the small weights of more splits 1.05–1.07× (3072² 9.65 / 10.40 →
         * 10.14 / 11.18, 1024×4096 8.52 / 9.21 → 9.04 / 9.88). */
        if (!fk_skinny32_large(p) ||
            !fk_grid_gains(fk_skinny_grid<Mma, 2, 4, 4, true, 1, true>(p), later))
            return fk_go_skinny32<Mma, true>(p, st, ws_need, ws, ws_bytes);
    }
    if constexpr (RS && Mma::KSS >= 64) {
        /* Block scales in units of the current group (FK_SCALE_BLOCK_RS), 64-k super-steps:
         * one accumulator set, so the later order fits 4 blocks per multiprocessor (128
         * registers on sm_90a, against 162 and 188 in the two orders with a set per group,
         * which take 3 and 2). The earlier order (164 registers, 3 blocks) where it fills the
         * wave as the rule above says, measured against the 4 blocks' grid; else the later
         * order at 4 blocks where they run more blocks or fewer waves than 3, and at 3 where
         * the grid is the same: there 4 blocks per multiprocessor were 1.2–1.3× slower back
         * to back (N = 8704–10752 at K = 3072 and 4096, 9216×8192; level in single calls),
         * presumably because the next call's blocks take the free places first. H100 back to
         * back, block:128, M = 17 / 32, against the sets per group: 14336×4096 41.62 / 44.31 →
         * 25.63 / 26.89 µs, 13824×5120 49.47 / 52.82 → 30.74 / 33.37, 8192² 39.38 / 41.40 →
         * 29.15 / 31.11, 28672×8192 115.42 / 121.45 → 95.48 / 102.76, 4096×14336 27.87 /
         * 30.20 → 25.86 / 28.11, 12288×3072 16.35 / 18.02 → 15.54 / 16.81 (earlier order),
         * 3072×12288 19.74 / 21.02 → 18.00 / 19.20 (earlier), 9216×3072 16.03 / 17.27 →
         * 15.74 / 17.00 (3 blocks). */
        const FkSkinnyGrid g4 = fk_skinny_grid<Mma, 2, 4, 4, true, 4, true, true>(p);
        if (early_fills(fk_wave_fill(g4))) return fk_go_skinny<Mma, 2, 4, 4, true, 1, false, true>(p, st, ws_need, ws, ws_bytes);
        if (fk_grid_gains(later, g4)) return fk_go_skinny<Mma, 2, 4, 4, true, 4, true, true>(p, st, ws_need, ws, ws_bytes);
        return fk_go_skinny<Mma, 2, 4, 4, true, 1, true, true>(p, st, ws_need, ws, ws_bytes);
    }
    if constexpr (!BLOCK) {
        /* 9–16 rows: one row fragment unswapped, A's rows beside the weight (102 registers on
         * sm_90a: 4 blocks per multiprocessor, as the two fragments in the later order take,
         * for half their products and rows of A), unless the two in the earlier order (3
         * blocks) fill one wave to 85 % or more and the one fragment's grid fills it less by 5
         * points. Back to back, M = 9 / 16, against the two fragments, H100 (H200):
         * 4096² 9.31 / 9.45 → 8.40 / 8.72 µs (8.61 / 9.04 → 7.59 / 8.06), 9216×3072 15.83 /
         * 15.92 → 13.52 / 13.99 (15.37 / 15.62 → 12.40 / 13.15), 14336×4096 21.39 / 21.85 →
         * 20.59 / 20.80 (19.95 / 20.51 → 16.71 / 17.55), 28672×8192 83.10 / 84.92 → 79.81 /
         * 80.74 (66.47 / 73.56 → 62.61 / 65.10); where the earlier order fills the wave it stays
         * faster (H100 6144×4096 11.52 / 11.79 against 12.11 / 12.50, 11008×4096 17.50 / 17.85
         * against 17.99 / 18.50). */
        if (p.M <= 16 && !early_fills(fk_wave_fill(fk_skinny_grid<Mma, 1, 4, 4, false, 1, false>(p))))
            return fk_go_skinny<Mma, 1, 4, 4, false, 1, false>(p, st, ws_need, ws, ws_bytes);
    }
    /* Tensor and channel scales: the earlier order (3 blocks per multiprocessor) also where the
     * later one's 4 run no more blocks and no fewer waves, from 16 M bytes of weight: the same
     * grid with a place left free on most multiprocessors was slower back to back, as with
     * block scales above. H100 back to back, tensor, M = 17 / 32: 9216×3072 16.58 / 18.53 →
     * 13.70 / 14.94 µs, 10752×3072 16.62 / 18.67 → 14.27 / 15.44, 10240×4096 21.41 / 23.48 →
     * 17.78 / 19.14, 9216×8192 40.89 / 43.30 → 32.30 / 34.61; with the 4 MB weights 2048² and
     * 1024×4096 (each warp 2 super-steps) up to 6 % slower (2048² M = 32 6.29 → 6.67), so not
     * there. */
    if constexpr (!BLOCK) {
        if (fk_skinny32_large(p) && !fk_grid_gains(eg, later))
            return fk_go_skinny<Mma, 2, 4, 4, false, 1, false>(p, st, ws_need, ws, ws_bytes);
    }
#endif
    if (early_fills(fk_wave_fill(later)))
        return fk_go_skinny<Mma, 2, 4, 4, BLOCK, 1, false, RS>(p, st, ws_need, ws, ws_bytes);
    return fk_go_skinny<Mma, 2, 4, 4, BLOCK, 1, true, RS>(p, st, ws_need, ws, ws_bytes);
}

/* Whether n columns in tiles of bn make one wave of per_sm blocks per multiprocessor that
 * leaves at most a tenth of the places idle. */
static bool fk_skinny_one_wave(long long n, int bn, int per_sm) {
    const long long tiles = (n + bn - 1) / bn, slots = (long long)per_sm * fk_sm_count();
    return tiles <= slots && tiles * 10 >= slots * 9;
}

/* M ≤ 16. Where the column tiles of 8 or 3 fragments (64 or 24 columns on NVIDIA) make one
 * wave of one block per multiprocessor, blocks of 12 or 21–24 warps: each splits its tile's K
 * between its own warps and adds their sums in shared memory, with no split-K sum through L2
 * after the loop (H100 back to back, N = 8192 and 3072: 1.02–1.25× faster than the 4-warp
 * blocks picked before). The register file bounds the warp counts (a quarter of it per
 * scheduler: 3 and 5–6 warps there at the 152 and 80 registers each form needs). At N = 12288
 * tiles of 6 fragments (48 columns) in two blocks of 6 warps per multiprocessor (158 registers
 * with the two operand sets taking turns), against the 96-column tiles of 7 warps, one block
 * each, that it took before (back to back, tensor scales, M = 1 / 16: H100 12288×3072 12.76 /
 * 13.67 → 12.46 / 13.21 µs, 12288×4096 16.65 / 18.45 → 16.48 / 16.88; H200 10.16 / 12.09 →
 * 9.91 / 10.95 and 13.12 / 16.17 → 12.79 / 13.70; H100 12288×8192 M = 1 1 % slower, 32.03 →
 * 32.46, until the swapped form took 8 warps: fk_skinny48_warps). At 24 columns 24 warps where
 * each still gets 256 or more of K (K = 12288: 2–3 % faster than 21; K = 3072, where each gets
 * 128, 1 % slower), and where K ≤ 3072 12 warps in two blocks per multiprocessor, which split
 * K between them and add their sums through L2 (H100 back to back against 21 warps: 3072²
 * M = 1 5.29 → 5.10 µs, M = 16 5.90 → 5.55; 3072×2048 4.15 → 4.08 and 4.65 → 4.47; at K = 4096
 * and 5120 they were 4–10 % slower, and 6 warps in four blocks slower everywhere). Block
 * scales' second accumulator set and scales take 8 and 12 warps (196 and 106 registers on
 * sm_90a), 18 at 3 fragments (96 registers) where each warp gets 256 or more of
 * K (block:128, 3072×12288 back to back on the H100: 1.03–1.04× faster than 15, which was 1.06×
 * faster than 12; at K = 3072 18 and 15 warps were 1.03–1.04× slower than 12), and at 48 columns
 * 6 (1.2× faster than the 4-warp blocks they used before; 96 columns in 6 warps of 255
 * registers measured 1.15× slower).
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
/* The 48-column tiles' warps per block (two blocks per multiprocessor): 6 at 158 (tensor
 * scales, the operand sets taking turns) and 146 registers (block scales in units of the current
 * group) on sm_90a; swapped at M ≤ 8, where they take 120 and 116, 8 (back to back, M = 1 / 8,
 * against 6: H100 tensor scales 12288×4096 16.45 / 16.61 → 16.20 / 16.52 µs, 12288×8192 32.50 /
 * 32.47 → 31.76 / 31.89, but 12288×3072 M = 8 12.62 → 12.69; block:128 12288×3072 13.10 / 13.32
 * → 12.83 / 13.16, 12288×4096 17.42 / 17.55 → 16.91 / 17.16; H200 tensor scales 12288×3072
 * M = 1 9.87 → 9.81, 12288×8192 24.04 / 24.33 → 23.04 / 23.25, block:128 12288×4096 13.98 /
 * 14.27 → 13.12 / 13.40; block:64 2–5 % on both). */
__host__ __device__ constexpr int fk_skinny48_warps(bool swapped) { return swapped ? 8 : 6; }
struct FkSkinnyForm {
    int nj, per_sm; /* fragments per column tile, blocks per multiprocessor */
};
static int fk_skinny16_form(long long n, bool block) {
#if FK_FRAG_NV
    /* the same tiles with block scales or without */
    static const FkSkinnyForm forms[] = {{8, 1}, {3, 1}, {6, 2}, {0, 0}}, *const block_forms = forms;
#else
    static const FkSkinnyForm forms[] = {{8, 1}, {3, 1}, {0, 0}}, block_forms[] = {{3, 1}, {0, 0}};
#endif
    for (const FkSkinnyForm *f = block ? block_forms : forms; f->nj; f++)
        if (fk_skinny_one_wave(n, f->nj * FK_FRAG_TN, f->per_sm)) return f->nj;
    return 0;
}
/* One wave's fill by the 4-warp skinny16 blocks without block scales (0: more than a wave): the
 * unswapped blocks' grid, also where M ≤ 8 launches them swapped (with fewer registers, so
 * possibly more blocks per multiprocessor), since fk_gemm_pick's thresholds were measured
 * with this quantity. */
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
         * set, so the 64- and 24-column tiles take as many warps as with tensor scales (12 and 24,
         * at 168 and 80 registers on sm_90a, against 8 and 18). H100 back to back, block:128,
         * M = 1 / 16 against the two-set forms: 8192² 23.83 / 25.10 → 23.25 / 24.16 µs, 3072×12288
         * 14.79 / 16.07 → 14.18 / 15.38, 3072×6144 8.61 / 9.51 → 8.48 / 9.35; block:32 6–8 %. Not
         * elsewhere: the 96-column tiles of 7 warps lost 3 % to the two-set 48-column tiles at
         * N = 12288, 12 warps at 24 columns and K = 3072 1 %, and the 4-warp blocks of 64 columns
         * 7–27 % at 4096² and 14336×4096 (where those of 32 columns won, below).
         * These forms load the next super-step's rows of A beside its weight (not A_LATE) where
         * registers allow. Not the 24-column one unswapped at 64-k super-steps: at its 80-register
         * cap that spilled 20–24 bytes and was 1–9 % slower at M = 16 (block:128 3072×12288 15.11 →
         * 15.84–16.50 µs); at 32 or 16 k it fits (H100 back to back, 3072×12288 M = 16 block:32
         * 19.52 → 18.44 µs, block:16 30.80 → 29.24, single calls up to 1.25× faster). Not the
         * 64-column one unswapped at 16 k (block:16 8192² M = 16 38.91 → 40.50). Elsewhere at 64 k
         * (sm_90a registers: swapped 24 columns 72 → 80; 64 columns 151 → 168 and the 4-warp blocks
         * of 32 columns 101 → 112, still as many blocks per multiprocessor; those of 64 columns
         * 162 → 176, three blocks → two). H100 back to back, block:128, swapped M = 1 / 8:
         * 3072×6144 7.84 / 8.34 → 7.71 / 7.98 µs, 3072×12288 13.68 / 14.11 → 13.53 / 13.90,
         * 6144×4096 10.28 / 11.22 → 10.17 / 10.71, but 14336×4096 M = 1 20.40 → 20.67; unswapped
         * M = 9 / 16: 12288×3072 14.06 / 14.40 → 13.83 / 14.15, 8192² 24.02 / 24.20 → 23.56 /
         * 23.76, 8192×3072 10.68 / 10.99 → 10.18 / 10.30, 6144×4096 12.91 / 13.22 → 12.56 / 12.88,
         * 4096×14336 22.21 / 22.66 → 21.88 / 22.27, but 11008×4096 M = 9 18.75 → 18.91; block:64
         * alike. */
        const int f = fk_skinny16_form(p.N, false);
        if (f == 8) return fk_go_skinny<Mma, 1, 8, 12, true, 1, Mma::KSS == 16 && !SWAP, true, false, SWAP>(p, st, ws_need, ws, ws_bytes);
        if (f == 3 && p.K >= 24 * 256) return fk_go_skinny<Mma, 1, 3, 24, true, 1, (Mma::KSS > 32) && !SWAP, true, false, SWAP>(p, st, ws_need, ws, ws_bytes);
        /* Where the two-set forms take 48-column tiles in two blocks of 6 warps per
         * multiprocessor (N = 12288 on 132), the same tiles with one set, from 64-k super-steps
         * (block:64 and coarser). Back to back, M = 1 / 8 / 16, block:128 12288×3072: H100 13.57 /
         * 13.96 / 14.50 → 13.20 / 13.57 / 14.35 µs, H200 11.63 / 12.16 / 13.56 → 10.92 / 11.41 /
         * 13.12; 12288×4096 alike; block:64 H100 2–3 %, H200 9–10 % at M ≤ 8 and 3 % at 16. At
         * 32 k (block:32, A's rows loaded early) M = 16 lost 25 % (H100 12288×3072 17.45 →
         * 21.84), and 9 warps instead of 6 lost up to 40 % at M = 16. */
        if constexpr (Mma::KSS >= 64) {
            if (f == 6) return fk_go_skinny<Mma, 1, 6, fk_skinny48_warps(SWAP), true, 2, false, true, false, SWAP>(p, st, ws_need, ws, ws_bytes);
        }
        /* Where the two-set forms would take 4-warp blocks: the same blocks with one set, in 32- or
         * 64-column tiles (at 64-k super-steps 112 and 176 registers on sm_90a, so 4 and 2 blocks
         * per multiprocessor; swapped at M ≤ 8 101 and 148, 4 and 3). At 64-k super-steps the
         * 64-column tiles where their grid fills a wave by 5 points more, else the 32-column ones;
         * at 32 k (block:32) the 64-column ones. H200 back to back against the two-set blocks, M =
         * 1 / 16, block:128: 4096² 8.40 / 10.40 → 7.16 / 9.02 µs, 14336×4096 19.32 / 22.82 → 16.50
         * / 20.87, 4096×14336 19.37 / 23.44 → 16.94 / 21.04, 4096×11008 15.88 / 19.34 → 13.77 /
         * 17.28 (32 columns), 11008×4096 19.20 / 22.77 → 13.80 / 18.65, 6144×4096 12.41 / 15.14 →
         * 9.11 / 12.35 (64 columns); block:64 alike; block:32 14336×4096 34.20 / 34.01 → 24.76 /
         * 27.27, 11008×4096 20.17 / 22.42 → 17.67 / 20.00, but 6144×4096 11.90 / 13.78 → 11.05 /
         * 14.84. H100 at M = 1: 5–19 % at block:128 (4096² 8.93 → 7.97), block:32 up to 24 %
         * (14336×4096 33.88 → 25.72), 6144×4096 3 % slower (12.32 → 12.65). (Unmeasured at 16-k
         * super-steps, block:16: not there.) */
        if constexpr (Mma::KSS >= 32) {
            if (!f) {
                if constexpr (Mma::KSS >= 64) {
                    const double w32 = fk_wave_fill(fk_skinny_grid<Mma, 1, 4, 4, true, 1, false, true, false, SWAP>(p));
                    const double w64 = fk_wave_fill(fk_skinny_grid<Mma, 1, 8, 4, true, 1, false, true, false, SWAP>(p));
                    if (w64 < w32 + 0.05) return fk_go_skinny<Mma, 1, 4, 4, true, 1, false, true, false, SWAP>(p, st, ws_need, ws, ws_bytes);
                }
                return fk_go_skinny<Mma, 1, 8, 4, true, 1, false, true, false, SWAP>(p, st, ws_need, ws, ws_bytes);
            }
        }
    }
#endif
    switch (fk_skinny16_form(p.N, BLOCK)) {
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
        else return fk_go_skinny<Mma, 1, 6, fk_skinny48_warps(SWAP), false, 2, false, false, true, SWAP>(p, st, ws_need, ws, ws_bytes);
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

#endif

/*
 * Quantisation on the GPU: scale search, cast and (K/16, N, 16) packing of one chunk of rows,
 * giving the bytes of feather_quantize (include/feather/quant.h). Every floating-point
 * operation comes from kernels/quant_hd.h, whose functions the CPU tests run against the
 * library; what this file adds is which thread does which operation, in which order:
 *
 *   - channel and block groups (and the rows of F32 tensor mode): a team of 16 threads per
 *     group, thread l being lane l of quant.h step 4: it adds the errors of the group's
 *     elements l, l+16, l+32, … in that order, one candidate after another. The lanes are then
 *     combined by exchanging values between threads whose lane numbers differ in bit 3, 2, 1,
 *     0: exactly the tree of step 4. Candidates are scanned upwards with '<' (step 6). The
 *     chosen group is cast by the same team, so the search and the cast read the weights
 *     while they are in registers or L1;
 *   - tensor mode: a histogram of 15-bit patterns (16-bit weights; integer counts, so any
 *     order of atomic additions gives the same table) or a maximum (absmax, F32) for the host
 *     to finish, then a plain cast with the one scale;
 *   - statistics: 8 threads per row, thread l summing the columns c ≡ l (mod 8) in order in
 *     double, then one thread adding the 8 lanes in order: the sums of src/quant_kernels.h.
 */
#include "vendor.h"
#include "fk_api.h"
#include "quant_hd.h"

#include <type_traits>

#define FKQ_THREADS 256
#define FKQ_CC 16         /* candidates evaluated per sweep over a group */
#define FKQ_HIST_BINS 32768
#define FKQ_HIST_C 8192   /* pattern counts per pass (u32 in shared memory: 32 KiB) */
#define FKQ_HIST_W 4096   /* importance sums per pass (u64: 32 KiB) */

static_assert((int)FK_DT_F16 == (int)FKQ_F16 && (int)FK_DT_BF16 == (int)FKQ_BF16 && (int)FK_DT_F32 == (int)FKQ_F32,
              "dtype codes");

template <int DT> __device__ __forceinline__ float ld(const void *w, int64_t i) { return fkq_load(DT, w, i); }

__device__ __forceinline__ float team_max(float v) {
    for (int m = 8; m; m >>= 1) {
        float o = fk_shfl_xor16(v, m);
        v = o > v ? o : v;
    }
    return v;
}

/* Step 4's tree over the team: thread l holds L_l and ends with the total (every thread). */
__device__ __forceinline__ float team_tree(float v) {
    v = fkq_add(v, fk_shfl_xor16(v, 8));
    v = fkq_add(v, fk_shfl_xor16(v, 4));
    v = fkq_add(v, fk_shfl_xor16(v, 2));
    return fkq_add(v, fk_shfl_xor16(v, 1));
}

/* Byte offset of code (r, c) of a chunk in its output layout. */
__device__ __forceinline__ int64_t q_index(const fk_quant_params &p, int64_t r, int64_t c) {
    return p.packed ? (c >> 4) * 16 * p.rows + 16 * r + (c & 15) : r * p.k + c;
}

/* Adds one sweep's errors: lane sums L of the FKQ_CC candidates (cs, ci) for magnitude a. */
__device__ __forceinline__ void sweep(float *L, float a, const float *cs, const float *ci, const float *imp,
                                      int64_t col, const fkq_fmt &f) {
    if (imp) {
        const float im = imp[col];
#pragma unroll
        for (int jj = 0; jj < FKQ_CC; jj++) L[jj] = fkq_add(L[jj], fkq_err_imp(a, cs[jj], ci[jj], im, f));
    } else {
#pragma unroll
        for (int jj = 0; jj < FKQ_CC; jj++) L[jj] = fkq_add(L[jj], fkq_err(a, cs[jj], ci[jj], f));
    }
}

/* Channel and block groups. EPL > 0: the group has at most 16·EPL weights, kept in registers
 * (thread l holds elements l + 16t); EPL == 0: any length, read again from memory per sweep. */
template <int DT, int EPL>
__global__ void __launch_bounds__(FKQ_THREADS) fkq_search_cast_kernel(fk_quant_params p) {
    const int lane = threadIdx.x & 15;
    const int64_t team = ((int64_t)blockIdx.x * FKQ_THREADS + threadIdx.x) >> 4;
    const int64_t gpr = p.k / p.group, G = p.group;
    if (team >= p.rows * gpr) return; /* whole teams leave together */
    const int64_t r = team / gpr, c0 = (team % gpr) * G, base = r * p.k + c0;
    const fkq_fmt f = fkq_fmt_of(p.e4m3);
    float wr[EPL > 0 ? EPL : 1];
    float amax = 0.0f;
    unsigned nf = 0;
    if (EPL > 0) {
#pragma unroll
        for (int t = 0; t < EPL; t++) {
            const int64_t i = lane + 16 * t;
            wr[t] = i < G ? ld<DT>(p.w, base + i) : 0.0f;
            nf += fkq_nonfinite(wr[t]);
            const float a = fkq_mag(wr[t]);
            amax = a > amax ? a : amax;
        }
    } else {
        for (int64_t i = lane; i < G; i += 16) {
            const float w = ld<DT>(p.w, base + i);
            nf += fkq_nonfinite(w);
            const float a = fkq_mag(w);
            amax = a > amax ? a : amax;
        }
    }
    amax = team_max(amax);
    float s = 1.0f;
    const float sa = fkq_sabs(amax, f);
    if (sa != 0.0f && p.nr == 1) s = sa;
    if (sa != 0.0f && p.nr > 1) {
        float best = 0.0f;
        int bj = 0;
        for (int j0 = 0; j0 < p.nr; j0 += FKQ_CC) {
            float cs[FKQ_CC], ci[FKQ_CC], L[FKQ_CC];
#pragma unroll
            for (int jj = 0; jj < FKQ_CC; jj++) {
                const int j = j0 + jj < p.nr ? j0 + jj : p.nr - 1; /* past nr: computed, ignored */
                cs[jj] = fkq_cand_s(sa, p.ratios[j]);
                ci[jj] = fkq_inv(cs[jj]);
                L[jj] = 0.0f;
            }
            if (EPL > 0) {
#pragma unroll
                for (int t = 0; t < EPL; t++)
                    if (lane + 16 * t < G) sweep(L, fkq_mag(wr[t]), cs, ci, p.imp, c0 + lane + 16 * t, f);
            } else {
                for (int64_t i = lane; i < G; i += 16) sweep(L, fkq_mag(ld<DT>(p.w, base + i)), cs, ci, p.imp, c0 + i, f);
            }
#pragma unroll
            for (int jj = 0; jj < FKQ_CC; jj++) {
                const float t = team_tree(L[jj]);
                const int j = j0 + jj;
                if (j < p.nr && (j == 0 || fkq_better(t, best))) {
                    best = t;
                    bj = j;
                }
            }
        }
        s = fkq_cand_s(sa, p.ratios[bj]);
    }
    if (lane == 0) p.scales[team] = s;
    const float inv = fkq_inv(s);
    if (EPL > 0) {
#pragma unroll
        for (int t = 0; t < EPL; t++) {
            const int64_t i = lane + 16 * t;
            if (i < G) p.q[q_index(p, r, c0 + i)] = fkq_cast(wr[t], inv, p.e4m3);
        }
    } else {
        for (int64_t i = lane; i < G; i += 16) p.q[q_index(p, r, c0 + i)] = fkq_cast(ld<DT>(p.w, base + i), inv, p.e4m3);
    }
    if (nf) atomicAdd(p.nonfinite, (unsigned long long)nf);
}

/* F32 tensor mode: each row's totals of the tensor's fixed candidates (one team per row). */
template <int DT>
__global__ void __launch_bounds__(FKQ_THREADS) fkq_row_totals_kernel(fk_quant_params p) {
    const int lane = threadIdx.x & 15;
    const int64_t r = ((int64_t)blockIdx.x * FKQ_THREADS + threadIdx.x) >> 4;
    if (r >= p.rows) return;
    const fkq_fmt f = fkq_fmt_of(p.e4m3);
    for (int j0 = 0; j0 < p.nr; j0 += FKQ_CC) {
        float cs[FKQ_CC], ci[FKQ_CC], L[FKQ_CC];
#pragma unroll
        for (int jj = 0; jj < FKQ_CC; jj++) {
            const int j = j0 + jj < p.nr ? j0 + jj : p.nr - 1;
            cs[jj] = p.cand_s[j];
            ci[jj] = p.cand_inv[j];
            L[jj] = 0.0f;
        }
        for (int64_t i = lane; i < p.k; i += 16) sweep(L, fkq_mag(ld<DT>(p.w, r * p.k + i)), cs, ci, p.imp, i, f);
#pragma unroll
        for (int jj = 0; jj < FKQ_CC; jj++) {
            const float t = team_tree(L[jj]);
            if (lane == 0 && j0 + jj < p.nr) p.totals[r * p.nr + j0 + jj] = t;
        }
    }
}

/* Cast with one scale: a thread per 16 consecutive weights of a row (one 16-byte piece). */
template <int DT>
__global__ void __launch_bounds__(FKQ_THREADS) fkq_cast_kernel(fk_quant_params p) {
    const int64_t kp = (p.k + 15) / 16, pc = (int64_t)blockIdx.x * FKQ_THREADS + threadIdx.x;
    if (pc >= p.rows * kp) return;
    const int64_t r = pc / kp, c = (pc % kp) * 16, base = r * p.k + c;
    const int n = p.k - c < 16 ? (int)(p.k - c) : 16;
    const float inv = fkq_inv(p.scale);
    unsigned nf = 0;
    uint32_t word[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 16; i++)
        if (i < n) {
            const float w = ld<DT>(p.w, base + i);
            nf += fkq_nonfinite(w);
            word[i / 4] |= (uint32_t)fkq_cast(w, inv, p.e4m3) << (8 * (i % 4));
        }
    if (p.packed || p.k % 16 == 0) {
        /* whole aligned pieces: q is 16-byte aligned and so is every piece */
        *(uint4 *)(p.q + q_index(p, r, c)) = make_uint4(word[0], word[1], word[2], word[3]);
    } else {
        for (int i = 0; i < n; i++) p.q[base + i] = (uint8_t)(word[i / 4] >> (8 * (i % 4)));
    }
    if (nf) atomicAdd(p.nonfinite, (unsigned long long)nf);
}

/* Statistics: 8 threads per row (FKQ_THREADS / 8 rows per block). */
template <int DT>
__global__ void __launch_bounds__(FKQ_THREADS) fkq_stats_kernel(fk_quant_params p) {
    __shared__ fkq_stat lanes[FKQ_THREADS];
    const int l = threadIdx.x & 7;
    const int64_t r = ((int64_t)blockIdx.x * FKQ_THREADS + threadIdx.x) >> 3;
    fkq_stat st = {0.0, 0.0, 0.0};
    if (r < p.rows) {
        const uint32_t gpr = (uint32_t)(p.k / p.group), G = (uint32_t)p.group;
        for (int64_t c = l; c < p.k; c += 8) {
            const float s = p.scales ? p.scales[r * gpr + (uint32_t)c / G] : p.scale;
            const float v = fkq_decode(p.q[q_index(p, r, c)], p.e4m3);
            fkq_stat_add(&st, ld<DT>(p.w, r * p.k + c), s, v);
        }
    }
    lanes[threadIdx.x] = st;
    __syncthreads();
    if (l == 0 && r < p.rows) {
        fkq_stat t = {0.0, 0.0, 0.0};
        for (int i = 0; i < 8; i++) {
            const fkq_stat &x = lanes[threadIdx.x + i];
            t.sum_sq = fkq_dadd(t.sum_sq, x.sum_sq);
            t.err_sq = fkq_dadd(t.err_sq, x.err_sq);
            t.max_err = x.max_err > t.max_err ? x.max_err : t.max_err;
        }
        p.row_stats[3 * r] = t.sum_sq;
        p.row_stats[3 * r + 1] = t.err_sq;
        p.row_stats[3 * r + 2] = t.max_err;
    }
}

/* Max |w| over the chunk (a maximum does not depend on the order). */
template <int DT>
__global__ void __launch_bounds__(FKQ_THREADS) fkq_amax_kernel(fk_quant_params p) {
    __shared__ float part[FKQ_THREADS];
    const int64_t total = p.rows * p.k;
    float m = 0.0f;
    unsigned nf = 0;
    for (int64_t i = (int64_t)blockIdx.x * FKQ_THREADS + threadIdx.x; i < total; i += (int64_t)gridDim.x * FKQ_THREADS) {
        const float w = ld<DT>(p.w, i);
        nf += fkq_nonfinite(w);
        const float a = fkq_mag(w);
        m = a > m ? a : m;
    }
    part[threadIdx.x] = m;
    __syncthreads();
    for (unsigned h = FKQ_THREADS / 2; h; h >>= 1) {
        if (threadIdx.x < h) part[threadIdx.x] = part[threadIdx.x + h] > part[threadIdx.x] ? part[threadIdx.x + h] : part[threadIdx.x];
        __syncthreads();
    }
    /* non-negative floats order like their bit patterns */
    if (threadIdx.x == 0) atomicMax(p.amax_bits, fkq_bits(part[0]));
    if (nf) atomicAdd(p.nonfinite, (unsigned long long)nf);
}

/* Pattern counts (W == false) or importance sums (W == true) of bins [lo, lo + NB): integers,
 * so the totals do not depend on which block adds what when. */
template <bool W>
__global__ void __launch_bounds__(FKQ_THREADS) fkq_hist_kernel(fk_quant_params p, unsigned lo) {
    constexpr unsigned NB = W ? FKQ_HIST_W : FKQ_HIST_C;
    __shared__ typename std::conditional<W, unsigned long long, unsigned>::type bins[NB];
    for (unsigned b = threadIdx.x; b < NB; b += FKQ_THREADS) bins[b] = 0;
    __syncthreads();
    const uint16_t *w = (const uint16_t *)p.w;
    const int64_t total = p.rows * p.k;
    for (int64_t i = (int64_t)blockIdx.x * FKQ_THREADS + threadIdx.x; i < total; i += (int64_t)gridDim.x * FKQ_THREADS) {
        const unsigned b = (unsigned)(w[i] & 0x7fffu) - lo;
        if (b < NB) {
            if (W) atomicAdd((unsigned long long *)&bins[b], (unsigned long long)p.impq[i % p.k]);
            else atomicAdd((unsigned *)&bins[b], 1u);
        }
    }
    __syncthreads();
    unsigned long long *out = W ? p.hist_w : p.hist;
    for (unsigned b = threadIdx.x; b < NB; b += FKQ_THREADS)
        if (bins[b]) atomicAdd(out + lo + b, (unsigned long long)bins[b]);
}

/* ---- launchers ---- */

/* Runs the statement(s) with DT the compile-time dtype code. */
#define FKQ_DISPATCH_DT(dt, ...)                                                                   \
    do {                                                                                           \
        if ((dt) == FK_DT_F16) {                                                                   \
            constexpr int DT = FK_DT_F16;                                                          \
            __VA_ARGS__;                                                                           \
        } else if ((dt) == FK_DT_BF16) {                                                           \
            constexpr int DT = FK_DT_BF16;                                                         \
            __VA_ARGS__;                                                                           \
        } else {                                                                                   \
            constexpr int DT = FK_DT_F32;                                                          \
            __VA_ARGS__;                                                                           \
        }                                                                                          \
    } while (0)

static unsigned blocks_for(int64_t threads) { return (unsigned)((threads + FKQ_THREADS - 1) / FKQ_THREADS); }

/* Enough blocks to fill the device a few times over, for the grid-stride loops. */
static unsigned stride_blocks(int64_t total) {
    static int sms;
    if (!sms) {
        int dev = 0, n = 0;
        if (hipGetDevice(&dev) != hipSuccess || hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, dev) != hipSuccess || n < 1) n = 16;
        sms = n;
    }
    int64_t b = (total + FKQ_THREADS - 1) / FKQ_THREADS, cap = (int64_t)sms * 8;
    return (unsigned)(b < cap ? (b > 0 ? b : 1) : cap);
}

extern "C" int fk_quant_search_cast(const fk_quant_params *p, void *stream) {
    const int64_t teams = p->rows * (p->k / p->group);
    if (teams <= 0) return 0;
    hipStream_t s = (hipStream_t)stream;
    const unsigned nb = blocks_for(teams * 16);
    FKQ_DISPATCH_DT(p->dtype, {
        if (p->group <= 16 * 8) fkq_search_cast_kernel<DT, 8><<<nb, FKQ_THREADS, 0, s>>>(*p);
        else if (p->group <= 16 * 16) fkq_search_cast_kernel<DT, 16><<<nb, FKQ_THREADS, 0, s>>>(*p);
        else fkq_search_cast_kernel<DT, 0><<<nb, FKQ_THREADS, 0, s>>>(*p);
    });
    return (int)hipGetLastError();
}

extern "C" int fk_quant_row_totals(const fk_quant_params *p, void *stream) {
    if (p->rows <= 0) return 0;
    FKQ_DISPATCH_DT(p->dtype, (fkq_row_totals_kernel<DT><<<blocks_for(p->rows * 16), FKQ_THREADS, 0, (hipStream_t)stream>>>(*p)));
    return (int)hipGetLastError();
}

extern "C" int fk_quant_cast(const fk_quant_params *p, void *stream) {
    const int64_t pieces = p->rows * ((p->k + 15) / 16);
    if (pieces <= 0) return 0;
    FKQ_DISPATCH_DT(p->dtype, (fkq_cast_kernel<DT><<<blocks_for(pieces), FKQ_THREADS, 0, (hipStream_t)stream>>>(*p)));
    return (int)hipGetLastError();
}

extern "C" int fk_quant_stats(const fk_quant_params *p, void *stream) {
    if (p->rows <= 0) return 0;
    FKQ_DISPATCH_DT(p->dtype, (fkq_stats_kernel<DT><<<blocks_for(p->rows * 8), FKQ_THREADS, 0, (hipStream_t)stream>>>(*p)));
    return (int)hipGetLastError();
}

extern "C" int fk_quant_amax(const fk_quant_params *p, void *stream) {
    const int64_t total = p->rows * p->k;
    if (total <= 0) return 0;
    FKQ_DISPATCH_DT(p->dtype, (fkq_amax_kernel<DT><<<stride_blocks(total), FKQ_THREADS, 0, (hipStream_t)stream>>>(*p)));
    return (int)hipGetLastError();
}

extern "C" int fk_quant_hist(const fk_quant_params *p, void *stream) {
    const int64_t total = p->rows * p->k;
    if (total <= 0) return 0;
    hipStream_t s = (hipStream_t)stream;
    const unsigned nb = stride_blocks(total);
    for (unsigned lo = 0; lo < FKQ_HIST_BINS; lo += FKQ_HIST_C) fkq_hist_kernel<false><<<nb, FKQ_THREADS, 0, s>>>(*p, lo);
    if (p->hist_w && p->impq)
        for (unsigned lo = 0; lo < FKQ_HIST_BINS; lo += FKQ_HIST_W) fkq_hist_kernel<true><<<nb, FKQ_THREADS, 0, s>>>(*p, lo);
    return (int)hipGetLastError();
}

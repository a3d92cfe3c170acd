/*
 * What the matrix-product kernels share across vendors: the parameter block, the epilogue
 * (scale, bias, rounding, stores), block-scale flushes and the shared-memory tile geometry.
 * Only the fragment/MMA layer (mma_nv.h, mma_amd.h) differs between vendors.
 */
#ifndef FK_GEMM_COMMON_H
#define FK_GEMM_COMMON_H

#include "vendor.h"
#include "fk_api.h"
#include "fk_hd.h"

struct FkParams {
    const uint16_t *A;    /* fp16 M×K */
    const uint8_t *Q;     /* e5m2 (K/16, N, 16) */
    const float *S;       /* scales by kind */
    const uint16_t *bias; /* N, output dtype, or NULL */
    uint16_t *Y;          /* M×N */
    float *part;          /* split-K partial sums, splits × M × N (skinny kernel) */
    unsigned *count;      /* per column tile: splits finished (returns to 0) */
    int M, N, K;
    int kind;             /* FK_SCALE_* */
    int G, gpr;           /* block: group and groups per row (K/G) */
    int gshift;           /* log2 G where G is a power of two, else -1 */
    int out_bf16;
    int splits;
};

/* The value stored for column col: tensor/channel scale, then bias, in f32. fk_col loads the
 * column's scale and bias, fk_finish_col applies them: an epilogue storing many values of few
 * columns loads them once, and the skinny kernel before its main loop, so that no dependent
 * global load is left after it. */
struct FkCol {
    float s, b;
};
__device__ __forceinline__ float fk_col_scale(const FkParams &p, int col) {
    return p.kind == FK_SCALE_TENSOR ? p.S[0] : p.kind == FK_SCALE_CHANNEL ? p.S[col] : 1.0f;
}
__device__ __forceinline__ float fk_col_bias(const FkParams &p, int col) {
    return !p.bias ? 0.0f : p.out_bf16 ? fk_bf16_to_f32(p.bias[col]) : fk_f16_to_f32(p.bias[col]);
}
__device__ __forceinline__ FkCol fk_col(const FkParams &p, int col) { return FkCol{fk_col_scale(p, col), fk_col_bias(p, col)}; }
__device__ __forceinline__ float fk_finish_col(const FkParams &p, FkCol c, float v) {
    if (p.kind == FK_SCALE_TENSOR || p.kind == FK_SCALE_CHANNEL) v = v * c.s;
    if (p.bias) v = v + c.b;
    return v;
}
__device__ __forceinline__ float fk_finish(const FkParams &p, int col, float v) {
    return fk_finish_col(p, fk_col(p, col), v);
}

__device__ __forceinline__ uint16_t fk_round(const FkParams &p, float v) {
    return p.out_bf16 ? fk_f32_to_bf16(v) : fk_f32_to_f16(v);
}

/* Stores columns col and col+1 of a row (col even; N % 8 == 0 keeps both in range). */
__device__ __forceinline__ void fk_store2(const FkParams &p, int row, int col, float v0, float v1) {
    uint32_t lo = fk_round(p, fk_finish(p, col, v0));
    uint32_t hi = fk_round(p, fk_finish(p, col + 1, v1));
    *(uint32_t *)(p.Y + (size_t)row * p.N + col) = lo | (hi << 16);
}
__device__ __forceinline__ void fk_store1_col(const FkParams &p, int row, int col, FkCol c, float v) {
    p.Y[(size_t)row * p.N + col] = fk_round(p, fk_finish_col(p, c, v));
}
__device__ __forceinline__ void fk_store1(const FkParams &p, int row, int col, float v) {
    fk_store1_col(p, row, col, fk_col(p, col), v);
}

/* The group holding k, whether one starts at k (fk_hd.h), and where the next one starts. */
__device__ __forceinline__ int fk_group_of(const FkParams &p, int k) { return fk_group_index(p.G, p.gshift, k); }
__device__ __forceinline__ bool fk_group_opens(const FkParams &p, int k) { return fk_group_starts(p.G, p.gshift, k); }
__device__ __forceinline__ int fk_next_group(const FkParams &p, int k) { return (fk_group_of(p, k) + 1) * p.G; }

/* Block scale of column col for the group holding k (0 beyond N: those columns are never
 * stored, and a zero keeps them finite). */
__device__ __forceinline__ float fk_block_scale(const FkParams &p, int col, int k) {
    return col < p.N ? __ldg(p.S + (size_t)col * p.gpr + fk_group_of(p, k)) : 0.0f;
}

/* ---- split K: blocks of one output tile add partial sums; the last one stores ----
 * Workspace: FK_MAX_COUNTERS counters first (zero between launches: each launch's last block
 * resets its own), then splits × M × N f32 partial sums, fully rewritten by every launch that
 * uses them. Counters never share bytes with partial sums, whatever the shapes. */
#define FK_MAX_COUNTERS 4096
#define FK_COUNTER_BYTES (FK_MAX_COUNTERS * 4)

__device__ __forceinline__ float *fk_part(const FkParams &p, int split, int row, int col) {
    return p.part + ((size_t)split * p.M + row) * p.N + col;
}

/* After this block wrote its partial sums: 1 in every thread of the block that completes
 * tile `counter` (it then adds the splits, in order), 0 elsewhere. */
__device__ __forceinline__ bool fk_split_last(const FkParams &p, int counter) {
    __shared__ unsigned fk_last;
    /* One release-acquire add by one thread: the barrier before it orders every thread's
     * partial sums before the release, the one after it the acquire before every thread's
     * loads (a fence in every thread, then a plain add, took about 0.5 µs longer per call). */
    __syncthreads();
    if (threadIdx.x == 0) {
        fk_last = fk_atomic_add_acq_rel(p.count + counter, 1u) == (unsigned)p.splits - 1;
        if (fk_last) p.count[counter] = 0; /* every block of the tile has arrived */
    }
    __syncthreads();
    return fk_last;
}

/* Run by the block that completes a tile: element i < count of the tile is at elem(i, row,
 * col) (false: outside Y); adds its splits' partial sums in split order (deterministic) and
 * stores the sum with store(row, col, sum). The loads of 4 elements × 4 splits are issued
 * together: one block drains a whole tile, and dependent round trips to L2 would dominate it. */
template <int NTHREADS, class Elem, class Store>
__device__ __forceinline__ void fk_split_finish(const FkParams &p, int count, Elem elem, Store store) {
    for (int base = threadIdx.x; base < count; base += 4 * NTHREADS) {
        int row[4], col[4];
        bool ok[4];
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int i = base + e * NTHREADS;
            ok[e] = i < count && elem(i, row[e], col[e]);
            v[e] = 0.0f;
        }
        for (int s0 = 0; s0 < p.splits; s0 += 4) {
            float t[4][4];
#pragma unroll
            for (int e = 0; e < 4; e++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    t[e][j] = ok[e] && s0 + j < p.splits ? fk_ld_coherent(fk_part(p, s0 + j, row[e], col[e])) : 0.0f;
#pragma unroll
            for (int e = 0; e < 4; e++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (s0 + j < p.splits) v[e] += t[e][j];
        }
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (ok[e]) store(row[e], col[e], v[e]);
    }
}

/* Shared-memory tile geometry of one pipeline stage (both vendors): A as BM rows of 64 halves
 * padded to 72 (rows land on different banks for the 16-byte fragment loads), B as 4 rows of
 * BN 16-byte records (one per kb), each row padded by 32 bytes for the same reason. */
#define FK_KC 64                 /* k per stage */
#define FK_LDA 72                /* halves per A row in shared memory */
#define FK_LDB(BN) ((BN) * 16 + 32)

template <int BM, int BN>
struct FkTile {
    static constexpr int A_BYTES = BM * FK_LDA * 2;
    static constexpr int B_BYTES = 4 * FK_LDB(BN);
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
};

/* Copies stage chunk kc (k in [64kc, 64kc+64)) of the A rows [m0, m0+BM) and the B columns
 * [n0, n0+BN) into shared memory; what lies past M, N or K becomes zeros. */
template <int BM, int BN, int NTHREADS>
__device__ __forceinline__ void fk_load_stage(const FkParams &p, unsigned char *stage, int m0,
                                              int n0, int kc) {
    uint16_t *sA = (uint16_t *)stage;
    unsigned char *sB = stage + FkTile<BM, BN>::A_BYTES;
    const int tid = threadIdx.x;
    const int k0 = kc * FK_KC;
#pragma unroll
    for (int it = 0; it < (BM * 8 + NTHREADS - 1) / NTHREADS; it++) {
        const int i = tid + it * NTHREADS;
        if (BM * 8 % NTHREADS && i >= BM * 8) break;
        int r = i >> 3, c = i & 7;
        int row = m0 + r, k = k0 + c * 8;
        bool v = row < p.M && k < p.K;
        const uint16_t *src = v ? p.A + (size_t)row * p.K + k : p.A;
        fk_copy<16>(sA + r * FK_LDA + c * 8, src, v);
    }
#pragma unroll
    for (int it = 0; it < (4 * BN + NTHREADS - 1) / NTHREADS; it++) {
        const int i = tid + it * NTHREADS;
        if (4 * BN % NTHREADS && i >= 4 * BN) break;
        int kb = i / BN, n = i % BN;
        int gkb = kc * 4 + kb, col = n0 + n;
        bool v = gkb * 16 < p.K && col < p.N;
        const uint8_t *src = v ? p.Q + ((size_t)gkb * p.N + col) * 16 : p.Q;
        fk_copy<16>(sB + kb * FK_LDB(BN) + n * 16, src, v);
    }
}

#endif

/*
 * NVIDIA fragment/MMA layer: mma.sync m16n8k16 (f16 × f16 → f32, sm_80+), fed with the K
 * permutation of mma_layout.h so that every fragment is one contiguous load per lane, from
 * shared memory (tiled kernel) or straight from global memory (skinny kernel).
 */
#ifndef FK_MMA_NV_H
#define FK_MMA_NV_H

#include "gemm_common.h"

/* Loads NW consecutive 32-bit words (NW = 1, 2, 4 or 8) with the widest accesses. */
template <int NW>
__device__ __forceinline__ void fk_ld_words(const void *ptr, uint32_t *w) {
    if constexpr (NW == 8) {
        uint4 a = ((const uint4 *)ptr)[0], b = ((const uint4 *)ptr)[1];
        w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
        w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    } else if constexpr (NW == 4) {
        uint4 a = *(const uint4 *)ptr;
        w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
    } else if constexpr (NW == 2) {
        uint2 a = *(const uint2 *)ptr;
        w[0] = a.x; w[1] = a.y;
    } else {
        w[0] = *(const uint32_t *)ptr;
    }
}

template <int P>
struct MmaNv {
    static constexpr int KSS = 16 * P; /* k per super-step */
    static constexpr int STEPS = P;    /* instructions per super-step and tile */
    static constexpr int TN = 8;       /* columns per tile (rows: 16) */
    static constexpr int NACC = 4;     /* f32 accumulators per lane and tile */

    struct AFrag { uint32_t r0[2 * P], r8[2 * P]; }; /* spans of rows g and g+8 */
    struct BFrag { uint32_t w[P]; };                  /* span of column g */

    static __device__ __forceinline__ void zero_a(AFrag &a) {
#pragma unroll
        for (int i = 0; i < 2 * P; i++) a.r0[i] = a.r8[i] = 0;
    }

    /* tile: row 0 of the 16-row A tile at the super-step's first k; ld in halves. */
    static __device__ __forceinline__ void load_a_smem(AFrag &a, const uint16_t *tile, int ld, int lane) {
        const uint16_t *p0 = tile + fk_span_row(lane) * ld + fk_span_k0(P, lane);
        fk_ld_words<2 * P>(p0, a.r0);
        fk_ld_words<2 * P>(p0 + 8 * ld, a.r8);
    }
    /* Rows row0+g and row0+g+8 of A at k = kbase + span; rows past M and k past K (the last
     * super-step when 16P does not divide K: spans are whole 4P-runs, K % 16 == 0) read as 0. */
    static __device__ __forceinline__ void load_a_gmem(AFrag &a, const FkParams &p, int row0, int kbase, int lane) {
        int r = row0 + fk_span_row(lane);
        int off = kbase + fk_span_k0(P, lane);
        zero_a(a);
        if (off >= p.K) return;
        if (r < p.M) fk_ld_words<2 * P>(p.A + (size_t)r * p.K + off, a.r0);
        if (r + 8 < p.M) fk_ld_words<2 * P>(p.A + (size_t)(r + 8) * p.K + off, a.r8);
    }
    /* sb: the stage's B row of the super-step's first kb; col0: first column of the tile. */
    static __device__ __forceinline__ void load_b_smem(BFrag &b, const unsigned char *sb, int ldb, int col0, int lane) {
        int k0 = fk_span_k0(P, lane);
        const unsigned char *ptr = sb + (k0 >> 4) * ldb + (col0 + fk_span_col(lane)) * 16 + (k0 & 15);
        fk_ld_words<P>(ptr, b.w);
    }
    /* Straight from the packed weight; tiles past N (N % 8 == 0: whole tiles) and spans past K
     * read as zeros. */
    static __device__ __forceinline__ void load_b_gmem(BFrag &b, const FkParams &p, int kbase, int col0, int lane) {
        int k0 = fk_span_k0(P, lane);
        const uint8_t *ptr = p.Q + ((size_t)((kbase + k0) >> 4) * p.N + col0 + fk_span_col(lane)) * 16 + (k0 & 15);
        if (col0 >= p.N || kbase + k0 >= p.K) {
#pragma unroll
            for (int i = 0; i < P; i++) b.w[i] = 0;
        } else if constexpr (P == 4) {
            uint4 v = fk_ld_stream16(ptr);
            b.w[0] = v.x; b.w[1] = v.y; b.w[2] = v.z; b.w[3] = v.w;
        } else if constexpr (P == 2) {
            uint2 v = fk_ld_stream8(ptr);
            b.w[0] = v.x; b.w[1] = v.y;
        } else {
            b.w[0] = fk_ld_stream4(ptr);
        }
    }

    /* Instruction j of the super-step: c += A_j · B_j. */
    static __device__ __forceinline__ void mma(const AFrag &a, const BFrag &b, int j, float *c) {
        uint32_t ar[4];
#pragma unroll
        for (int r = 0; r < 4; r++) ar[r] = fk_a_half(r) ? a.r8[fk_a_word(j, r)] : a.r0[fk_a_word(j, r)];
        uint32_t w = b.w[fk_b_word(j)];
        uint32_t b0 = fk_e5m2x2_lo(w), b1 = fk_e5m2x2_hi(w);
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(b0), "r"(b1));
    }

    /* The same with the operands' roles swapped (M <= 8): the weight fragments of columns 0–7 (w0)
     * and 8–15 (w8) of a 16-column tile as the 16-row operand, rows 0–7 of A as the 8-column
     * one; accumulator row = column of the tile, accumulator column = row of A. */
    static __device__ __forceinline__ void mma_swap(const AFrag &a, const BFrag &w0, const BFrag &w8, int j, float *c) {
        const uint32_t x0 = w0.w[fk_b_word(j)], x8 = w8.w[fk_b_word(j)];
        const uint32_t a0 = swap_a(x0, x8, 0), a1 = swap_a(x0, x8, 1), a2 = swap_a(x0, x8, 2), a3 = swap_a(x0, x8, 3);
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};\n"
            : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(a.r0[fk_swap_b_word(j, 0)]), "r"(a.r0[fk_swap_b_word(j, 1)]));
    }
    /* Register r of the swapped product's weight operand from word j of columns g (x0) and
     * g+8 (x8). */
    static __device__ __forceinline__ uint32_t swap_a(uint32_t x0, uint32_t x8, int r) {
        const uint32_t x = fk_swap_a_col8(r) ? x8 : x0;
        return fk_swap_a_hi(r) ? fk_e5m2x2_hi(x) : fk_e5m2x2_lo(x);
    }

    static __host__ __device__ __forceinline__ int acc_row(int lane, int i) { return fk_mma_c_row(lane, i); }
    static __host__ __device__ __forceinline__ int acc_col(int lane, int i) { return fk_mma_c_col(lane, i); }
    /* A lane's accumulators of a tile lie in NSC columns: accumulator i in column sc_of(i)'s. */
    static constexpr int NSC = FK_MMA_C_NCOLS;
    static __host__ __device__ __forceinline__ int sc_of(int i) { return fk_mma_c_scol(i); }

    /* Epilogue of one tile: accumulators 0,1 and 2,3 are column pairs. */
    static __device__ __forceinline__ void store(const FkParams &p, const float *c, int row0, int col0, int lane) {
#pragma unroll
        for (int i = 0; i < 4; i += 2) {
            int row = row0 + acc_row(lane, i), col = col0 + acc_col(lane, i);
            if (row < p.M && col < p.N) fk_store2(p, row, col, c[i], c[i + 1]);
        }
    }
};

#endif

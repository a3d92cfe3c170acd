/*
 * AMD gfx11 (RDNA3/3.5, wave32) fragment/MMA layer: v_wmma_f32_16x16x16_f16. Every lane's A
 * operand is 16 consecutive k of one row and its B operand is exactly one 16-byte record of
 * the packed weight (wmma_layout.h), so no K permutation is needed. Built for NVIDIA
 * (FK_WMMA_EMULATED, vendor.h), the instruction is done with warp shuffles instead.
 */
#ifndef FK_MMA_AMD_H
#define FK_MMA_AMD_H

#include "gemm_common.h"

struct MmaAmd {
    static constexpr int KSS = 16;
    static constexpr int STEPS = 1;
    static constexpr int TN = 16;
    static constexpr int NACC = FK_WMMA_CD_VALUES;

#if FK_AMD
    typedef _Float16 v16h __attribute__((ext_vector_type(16)));
    typedef float v8f __attribute__((ext_vector_type(8)));
    typedef uint32_t v8u __attribute__((ext_vector_type(8)));
#endif

    struct AFrag { uint4 lo, hi; }; /* 16 halves of one row */
    struct BFrag { uint4 w; };      /* 16 e5m2 bytes of one column */

    static __device__ __forceinline__ void load_a_smem(AFrag &a, const uint16_t *tile, int ld, int lane) {
        const uint4 *ptr = (const uint4 *)(tile + fk_wmma_a_row(lane) * ld + fk_wmma_ab_k(0));
        a.lo = ptr[0];
        a.hi = ptr[1];
    }
    static __device__ __forceinline__ void load_a_gmem(AFrag &a, const FkParams &p, int row0, int kbase, int lane) {
        int r = row0 + fk_wmma_a_row(lane);
        a.lo = a.hi = make_uint4(0, 0, 0, 0);
        if (r < p.M) {
            const uint4 *ptr = (const uint4 *)(p.A + (size_t)r * p.K + kbase);
            a.lo = ptr[0];
            a.hi = ptr[1];
        }
    }
    static __device__ __forceinline__ void load_b_smem(BFrag &b, const unsigned char *sb, int ldb, int col0, int lane) {
        (void)ldb;
        b.w = *(const uint4 *)(sb + (col0 + fk_wmma_b_col(lane)) * 16);
    }
    static __device__ __forceinline__ void load_b_gmem(BFrag &b, const FkParams &p, int kbase, int col0, int lane) {
        int col = col0 + fk_wmma_b_col(lane);
        b.w = make_uint4(0, 0, 0, 0);
        if (col < p.N) b.w = fk_ld_stream16(p.Q + ((size_t)(kbase >> 4) * p.N + col) * 16);
    }

    static __device__ __forceinline__ void mma(const AFrag &a, const BFrag &b, int j, float *c) {
        (void)j;
        /* the operands as 8 words of two halves each, k in order */
        const uint32_t aw[8] = {a.lo.x, a.lo.y, a.lo.z, a.lo.w, a.hi.x, a.hi.y, a.hi.z, a.hi.w};
        const uint32_t bw[8] = {fk_e5m2x2_lo(b.w.x), fk_e5m2x2_hi(b.w.x), fk_e5m2x2_lo(b.w.y), fk_e5m2x2_hi(b.w.y),
                                fk_e5m2x2_lo(b.w.z), fk_e5m2x2_hi(b.w.z), fk_e5m2x2_lo(b.w.w), fk_e5m2x2_hi(b.w.w)};
#if FK_AMD
        v8u au = {aw[0], aw[1], aw[2], aw[3], aw[4], aw[5], aw[6], aw[7]};
        v8u bu = {bw[0], bw[1], bw[2], bw[3], bw[4], bw[5], bw[6], bw[7]};
        v8f acc = {c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]};
        acc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(__builtin_bit_cast(v16h, au),
                                                         __builtin_bit_cast(v16h, bu), acc);
#pragma unroll
        for (int i = 0; i < 8; i++) c[i] = acc[i];
#else
        /* The instruction after the layout wmma_layout.h states: value v of lane l is
         * D[2v + l/16][l % 16], the dot product of row 2v + l/16 of A, which lane 2v + l/16
         * holds, with column l % 16 of B, this lane's own; products of two halves are exact in
         * f32 and are added in k order. */
        const int lane = threadIdx.x & 31;
#pragma unroll
        for (int v = 0; v < FK_WMMA_CD_VALUES; v++) {
            const int src = fk_wmma_cd_row(lane, v); /* the lane holding that row of A (fk_wmma_a_row) */
            float t = c[v];
#pragma unroll
            for (int w = 0; w < 8; w++) {
                const uint32_t x = __shfl_sync(0xffffffffu, aw[w], src);
                t = fmaf(fk_f16_to_f32((uint16_t)x), fk_f16_to_f32((uint16_t)bw[w]), t);
                t = fmaf(fk_f16_to_f32((uint16_t)(x >> 16)), fk_f16_to_f32((uint16_t)(bw[w] >> 16)), t);
            }
            c[v] = t;
        }
#endif
    }

    static __host__ __device__ __forceinline__ int acc_row(int lane, int i) { return fk_wmma_cd_row(lane, i); }
    static __host__ __device__ __forceinline__ int acc_col(int lane, int i) { (void)i; return fk_wmma_cd_col(lane); }
    /* All of a lane's accumulators of a tile lie in one column. */
    static constexpr int NSC = 1;
    static __host__ __device__ __forceinline__ int sc_of(int i) { (void)i; return 0; }

    static __device__ __forceinline__ void store(const FkParams &p, const float *c, int row0, int col0, int lane) {
        int col = col0 + acc_col(lane, 0);
#pragma unroll
        for (int i = 0; i < NACC; i++) {
            int row = row0 + acc_row(lane, i);
            if (row < p.M && col < p.N) fk_store1(p, row, col, c[i]);
        }
    }
};

#endif

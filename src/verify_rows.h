/* Internal: the verifier's per-row work on one converted weight, fused so that every weight row
 * is read once while it is in cache: the original row converted to f32, the fp8 row dequantised
 * (d = f32(q) · s, quant.h's one f32 multiply, the same values as feather_dequantize), the
 * weight-space sums, the fp32 reference product with the activations, optionally the product
 * with the dequantised weight (fp8 formats without a kernel), and the count of Inf/NaN codes.
 * An original value that is NaN or Inf (a conversion allowed to map such values did) is left
 * out of the weight sums (w and d count as 0 there) and counted (VS_NF); the reference products
 * take the value it was mapped to (d), so neither figure is NaN and only the other values' error
 * is measured.
 * Nothing N × K is allocated; rows are taken in blocks of VROWS_RB, k in chunks of VROWS_KC.
 *
 * Reduction order (fixed, so every thread count and SIMD level gives the same bits):
 *  - k is cut into 16-lane vectors, lane j holding k ≡ j (mod 16); a K that is not a multiple
 *    of 16 is padded with zero weights, zero codes and zero activations.
 *  - every lane sums in ascending k with fused multiply-adds (fmaf: one f32 rounding per step):
 *    Σ w², Σ e² (e = w − d, one f32 subtraction), Σ w·d, Σ d² per row, and Σ a·w (Σ a·d) per
 *    row and activation row; max|e| per lane.
 *  - a product's 16 lanes are added in f32 as a tree: l[j] += l[j + 8], then + 4, + 2, + 1.
 *  - a row's weight sums add their 16 lanes in double, lane 0 first; the tensor's totals add the
 *    rows in double in row order (done by the caller over rowsums).
 * The SIMD kernels (verify_rows_avx2.c, verify_rows_avx512.c) keep the 16 lanes as one or two
 * vectors and follow the same order, so they return what the scalar kernels (verify_rows.c)
 * return. Against the same sums in double the f32 lanes are off by well under 1e-5 of the sum
 * of the terms' magnitudes (tests/test_verify_rows.c checks that bound). */
#ifndef FEATHER_VERIFY_ROWS_H
#define FEATHER_VERIFY_ROWS_H

#include "internal.h"
#include "feather/quant.h"

#define VROWS_L 16   /* lanes */
#define VROWS_RB 16  /* weight rows per block (one task) */
#define VROWS_KC 256 /* k per chunk and activation rows per tile: the block's chunk, a tile's */
#define VROWS_MT 16  /* chunk and their accumulators (16 KiB each) stay in L1 */

/* Weight sums of one row, per lane (VS_NF: the original's NaN/Inf values); VS_MAX is a maximum. */
enum { VS_WW, VS_EE, VS_WD, VS_DD, VS_NF, VS_MAX, VS_COUNT };

typedef struct vrows_kernels {
    /* One weight row over nv 16-element vectors: w (dtype dt: F16, BF16 or F32) and the fp8 codes
     * at q + v·qstride (16 bytes each) with scale svec[v]. Writes wf[16v + j] = f32(w) (d where
     * that is NaN or Inf) and, when df is not NULL, df[16v + j] = d; adds to the lane sums
     * sums[VS_*·16 + j]. Returns the number of Inf/NaN codes among the 16·nv. */
    unsigned (*prep)(const void *w, feather_dtype dt, const uint8_t *q, size_t qstride, feather_fp8 fmt,
                     const float *svec, unsigned nv, float *wf, float *df, float *sums);
    /* For r < rows, t < m, j < 16 and v = 0, 1, … < len/16 in that order, with
     * c = acc + (r·ldacc + t)·16: c[j] = fmaf(a[t·lda + 16v + j], w[r·ldw + 16v + j], c[j]). */
    void (*mul)(const float *a, size_t lda, unsigned m, const float *w, size_t ldw, unsigned rows,
                unsigned len, float *acc, size_t ldacc);
    /* Inf/NaN codes among n bytes (e5m2: exponent all ones; e4m3fn: S.1111.111). */
    uint64_t (*bad_codes)(const uint8_t *q, uint64_t n, feather_fp8 fmt);
} vrows_kernels;

void feather_vrows_kernels(feather_simd level, vrows_kernels *k);
void feather_vrows_kernels_avx2(vrows_kernels *k);
void feather_vrows_kernels_avx512(vrows_kernels *k);

/* One converted weight and what to compute for it. */
typedef struct vrows_weight {
    const void *w;            /* original (N, K), row-major */
    feather_dtype wdt;        /* F16, BF16 or F32 */
    const uint8_t *q;         /* fp8 codes, packed (K/16, N, 16) or plain (N, K) */
    int packed;
    feather_fp8 fmt;
    const float *scales;      /* as quant.h's mode says */
    feather_scale_mode mode;
    unsigned group;
    uint64_t n, k;
    const float *a;           /* activations f32 in chunks: see vrows_a_index */
    uint64_t m;
    /* outputs */
    float *yref;              /* (M, N): Σ a·w */
    float *ydeq;              /* (M, N): Σ a·d, or NULL */
    double *rowsums;          /* (N, VS_COUNT) */
} vrows_weight;

/* The activations are stored chunk by chunk (VROWS_KC values of k, every activation row), so
 * the part a block's chunk reads is one contiguous stream: element (t, k) of M rows sits at
 * vrows_a_index(M, t, k), in vrows_a_size(M, K) floats; positions past K hold zeros. */
static inline size_t vrows_a_index(uint64_t m, uint64_t t, uint64_t k) {
    return (size_t)(((k / VROWS_KC) * m + t) * VROWS_KC + k % VROWS_KC);
}
static inline size_t vrows_a_size(uint64_t m, uint64_t k) {
    return (size_t)((k + VROWS_KC - 1) / VROWS_KC * m * VROWS_KC);
}

/* Per-worker scratch, in floats. */
size_t feather_vrows_scratch(const vrows_weight *w);

/* Rows [VROWS_RB·b, +VROWS_RB) of w; returns the Inf/NaN codes among them. */
uint64_t feather_vrows_block(const vrows_kernels *kn, const vrows_weight *w, uint64_t b, float *scratch);

/* The 16-lane tree sum of the order above. */
static inline float vrows_tree(const float *l) {
    const float a0 = l[0] + l[8], a1 = l[1] + l[9], a2 = l[2] + l[10], a3 = l[3] + l[11];
    const float a4 = l[4] + l[12], a5 = l[5] + l[13], a6 = l[6] + l[14], a7 = l[7] + l[15];
    const float b0 = a0 + a4, b1 = a1 + a5, b2 = a2 + a6, b3 = a3 + a7;
    return (b0 + b2) + (b1 + b3);
}

#endif

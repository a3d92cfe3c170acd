/* Internal: building blocks of the CPU matrix product (gemm_cpu.c), one set per SIMD level.
 *
 * The product is computed in panels of GEMM_CPU_NB = 64 output columns: the weight bytes of a
 * panel and a K-chunk are decoded once to f32 (bp[k][64], columns past N are zeros), A rows are
 * converted to f32 (af[rows][len]), and panel_mul adds af · bp into a rows × 64 f32
 * accumulator. All levels sum every output element in the same order (k ascending within a
 * chunk, chunks in order), and a·q of an fp16 and an e5m2 value is exact in f32, so fused and
 * unfused multiply-adds agree: every level returns the same bytes. */
#ifndef FEATHER_GEMM_CPU_H
#define FEATHER_GEMM_CPU_H

#include "internal.h"
#include "feather/gemm.h"

#define GEMM_CPU_NB 64  /* columns per panel */
#define GEMM_CPU_RB 64  /* A rows per block */
#define GEMM_CPU_KC 256 /* k per chunk */

typedef struct gemm_cpu_kernels {
    /* af[r][0..len) = f32(a[r·lda + 0..len)), rows × len; len % 16 == 0. */
    void (*a_convert)(const uint16_t *a, uint64_t lda, unsigned rows, unsigned len, float *af);
    /* bp[(kb-kb0)·16 + i][c] = e5m2 value of column n0+c at k = 16kb+i, for kb in [kb0, kb0+nkb),
     * c < ncols (ncols ≤ 64, a multiple of 8); columns ncols…63 become 0. */
    void (*b_decode)(const uint8_t *q, uint64_t n, uint64_t n0, unsigned ncols, uint64_t kb0,
                     unsigned nkb, float *bp);
    /* acc[r][c] += Σ_k af[r·len + k] · bp[k·64 + c], r < rows, c < 64, k ascending. */
    void (*panel_mul)(const float *af, unsigned rows, unsigned len, const float *bp, float *acc);
    /* acc[r][c] = fma(accg[r][c], s[c], acc[r][c]); accg[r][c] = 0. */
    void (*flush)(float *accg, unsigned rows, const float *s, float *acc);
} gemm_cpu_kernels;

void feather_gemm_cpu_kernels_avx2(gemm_cpu_kernels *k);
void feather_gemm_cpu_kernels_avx512(gemm_cpu_kernels *k);

/* The CPU product; arguments already checked. */
feather_status feather_gemm_cpu(feather_ctx *ctx, const feather_gemm_args *a, feather_error *err);
/* 1 when every one of the count block scales has a magnitude in [2^-126, 2^126] (the range of
 * the kernel's fast division) and the largest is at most 2^40 times the smallest: then a sum
 * kept in units of the current group's scale (the GPU's kernels with 192 × 128 and 128 × 256
 * tiles, its tiled kernels and some of its M ≤ 16 kernels) cannot leave f32's range. */
int feather_block_scales_rescalable(const float *s, uint64_t count);
/* The GPU product (src/gpu.c); FEATHER_E_UNSUPPORTED without a usable GPU. */
feather_status feather_gemm_gpu(const feather_gemm_args *a, feather_error *err);

#endif

/* Inner kernels of the fp8 codec, shared by the bulk cast (fp8.c), the tensor quantiser
 * (quantize_with.c) and the scale search. Not installed.
 *
 * Every kernel exists in a scalar version and, where it pays, in AVX2 (fp8_avx2.c) and
 * AVX-512 (fp8_avx512.c) versions that give bit-identical results. The SIMD files are built
 * with their instruction-set flags, so they must only be reached through the getters below,
 * which take the level from feather_ctx_simd() (already limited to what the CPU supports).
 *
 * For the scale search: the codes of one candidate on a run of n weights (any n) are
 *     feather_cast_fn cast = feather_cast_kernel(feather_ctx_simd(ctx), dtype, fmt, inv == 1.0f);
 *     int nonfinite = cast(w, n, inv, codes, 16);
 * (bit-identical to fp8(f32(w) · inv) at every level), and with uniform importance the
 * objective Σ (w − s·q)² of that candidate, in a fixed order that is the same at every level,
 * is what feather_stats_kernel accumulates (sum the 8 err_sq lanes in order 0 … 7). Select the
 * kernel once per tensor, not per group: the getters are cheap but not free. */
#ifndef FEATHER_QUANT_KERNELS_H
#define FEATHER_QUANT_KERNELS_H

#include "feather/fp8.h"
#include "internal.h"
#include "feather/quant.h"

#include <string.h>

/* ---- cast kernel ----
 * Writes q[i] = fp8(f32(src[i]) · inv) for i < n (the codec's definition: one f32 multiply,
 * RNE, saturating, NaN → +0, ±Inf → ±max) in 16-byte pieces: the piece holding elements
 * 16j … 16j+15 goes to dst + j·dst_stride. dst_stride == 16 is a contiguous run; only then may
 * n be any count (the last piece is partial). Otherwise n % 16 == 0. The packed layout is
 * dst_stride = 16·N. No alignment is needed for src or dst.
 *
 * Returns nonzero when at least one input element is NaN or ±Inf (before the multiply: a
 * finite weight that overflows after scaling saturates and is not reported). Callers that need
 * the exact count call feather_count_nonfinite on the run, which is only worth it in that rare
 * case.
 *
 * 'unit' kernels ignore inv and compute the plain cast (inv == 1); for F16 → e5m2 this is pure
 * 16-bit integer rounding, the fastest path, and BF16 → e5m2 joins it after an exact
 * bf16 → fp16 conversion (AVX2/AVX-512). Other casts work in f32 lanes. */
typedef int (*feather_cast_fn)(const void *src, size_t n, float inv, uint8_t *dst,
                               size_t dst_stride);

/* The kernel for a source dtype (F16, BF16 or F32) and format at a SIMD level; unit != 0 asks
 * for the plain-cast kernel (only valid when inv == 1.0f). Never NULL for those dtypes. */
feather_cast_fn feather_cast_kernel(feather_simd simd, feather_dtype src, feather_fp8 fmt,
                                    int unit);

/* Per-level tables behind feather_cast_kernel (do not call the SIMD ones directly). */
feather_cast_fn feather_cast_kernel_scalar(feather_dtype src, feather_fp8 fmt, int unit);
feather_cast_fn feather_cast_kernel_avx2(feather_dtype src, feather_fp8 fmt, int unit);
feather_cast_fn feather_cast_kernel_avx512(feather_dtype src, feather_fp8 fmt, int unit);

/* ---- tile kernel: 4 rows at once ----
 * Casts rows i = 0..3 over n columns (n % 64 == 0) of a row-major weight (src: first element
 * of row 0, src_stride: elements from one row to the next), row i with inv[i], and stores the
 * 16-byte piece of row i and columns 16p … 16p+15 at
 *   packed != 0:  dst + p·step + 16·i   (step = 16·N: the 4 rows' pieces are one 64-byte line
 *                                        of a (K/16, N, 16) slab)
 *   packed == 0:  dst + i·step + 16·p   (step = K: plain rows)
 * Working on 4 rows keeps 4 read streams in flight and assembles whole 64-byte lines in
 * registers, which is what lets the packed layout be written as fast as a plain one. nt != 0
 * writes those lines with streaming (non-temporal) stores, which skip reading the destination
 * line first; then every line must be 64-byte aligned (packed: dst and 16·N multiples of 64;
 * plain: dst and step multiples of 64) and the data will not be in cache afterwards. The
 * kernels do not fence: call feather_stream_fence() once after a batch of them, before other
 * threads may read the output (a fence per call would stall every call until its lines are
 * written out).
 * unit kernels ignore inv (all four are 1). Returns the non-finite flag like feather_cast_fn. */
typedef int (*feather_tile_fn)(const void *src, size_t src_stride, size_t n, const float inv[4],
                               uint8_t *dst, size_t step, int packed, int nt);
void feather_stream_fence(void);
/* Outputs of at least this many bytes are written with streaming stores: skipping the read
 * of each destination line before writing it roughly doubles the speed of a pass whose input
 * comes from DRAM (measured 2-3x for packed outputs of 2-6 MiB, which regular stores write as
 * slowly as huge ones), and such outputs would mostly leave the cache anyway. Smaller ones stay
 * in cache for whoever reads them next. */
#define FEATHER_STREAM_MIN ((uint64_t)1 << 20)
feather_tile_fn feather_tile_kernel(feather_simd simd, feather_dtype src, feather_fp8 fmt, int unit);
feather_tile_fn feather_tile_kernel_scalar(feather_dtype src, feather_fp8 fmt, int unit);
feather_tile_fn feather_tile_kernel_avx2(feather_dtype src, feather_fp8 fmt, int unit);
feather_tile_fn feather_tile_kernel_avx512(feather_dtype src, feather_fp8 fmt, int unit);

/* The scalar bulk cast (contiguous dst, any n): the reference the SIMD paths are tested
 * against. */
void feather_fp8_cast_scalar(feather_dtype src_dtype, const void *src, size_t n, float inv,
                             feather_fp8 fmt, uint8_t *dst);

/* ---- decoding ----
 * dst[i] = f32(q[i]) · s for n codes (any n): the exact value of each code, then one f32
 * multiply, as feather_dequantize defines it. Every level returns the scalar kernel's bits,
 * Inf and NaN codes included (the SIMD kernels leave a group of 8 holding one to it). */
typedef void (*feather_decode_fn)(const uint8_t *q, size_t n, float s, feather_fp8 fmt, float *dst);
feather_decode_fn feather_decode_kernel(feather_simd simd);
void feather_fp8_decode_scalar(const uint8_t *q, size_t n, float s, feather_fp8 fmt, float *dst);
feather_decode_fn feather_decode_kernel_avx2(void);

/* ---- error statistics of a cast run ----
 * Accumulates, for the n elements of src (n % 16 == 0 unless q_stride == 16) and their codes
 * laid out like the cast kernel's output (q, q_stride), in double precision:
 *   sum_sq[i % 8] += w²,  err_sq[i % 8] += e²,  max_err = max(max_err, |e|),
 * with e = w − s·v(q) (v the decoded fp8 value; s·v is exact in double). Non-finite weights
 * are skipped (they add exactly 0). Runs start at columns that are multiples of 16, so lane
 * i % 8 is the column's lane and each lane sees its elements in column order: the sums do not
 * depend on how a row is split into runs (as long as runs are visited in order), nor on the
 * SIMD level, since every level performs these same operations (separate multiply and add,
 * no reassociation). */
typedef struct feather_stat_lanes {
    double sum_sq[8];
    double err_sq[8];
    double max_err;
} feather_stat_lanes;

typedef void (*feather_stats_fn)(const void *src, size_t n, const uint8_t *q,
                                 size_t q_stride, float s, feather_fp8 fmt,
                                 feather_stat_lanes *acc);
feather_stats_fn feather_stats_kernel(feather_simd simd, feather_dtype src);
feather_stats_fn feather_stats_kernel_scalar(feather_dtype src);
feather_stats_fn feather_stats_kernel_avx2(feather_dtype src);
feather_stats_fn feather_stats_kernel_avx512(feather_dtype src);

/* Decoded fp8 values as doubles (index = code), built once; NaN codes of e4m3fn are never
 * produced by the casts and decode to NaN. */
const double *feather_fp8_values_f64(feather_fp8 fmt);

/* Element i of an F16, BF16 or F32 array as f32 (exact). */
static inline float feather_ld_as_f32(feather_dtype dt, const void *p, size_t i) {
    if (dt == FEATHER_F16) return feather_f16_to_f32(feather_ld16(p, i));
    if (dt == FEATHER_BF16) return feather_bf16_to_f32(feather_ld16(p, i));
    return feather_ldf32(p, i);
}

#endif

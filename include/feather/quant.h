/*
 * Scale search, quantisation and the (K/16, N, 16) prepacked layout.
 *
 * A weight W has shape (N, K): N output features (rows), K input features, row-major.
 * Dequantisation is W ≈ s · Q with f32 scales s:
 *   none      s = 1
 *   absmax    one s = max|W| / fp8_max
 *   tensor    one searched s
 *   channel   one searched s per row n                       (scales: N)
 *   block:G   one searched s per (row n, G consecutive k)    (scales: N × K/G, row-major)
 * A search picks, among candidate scales s_j = s_absmax · r_j, the one minimising
 * Σ imp[k] · (W − s·Q(W/s))² (imp = 1 unless importance weights are given); ties go to the
 * earlier candidate and r_0 = 1 is the absmax scale, so a search is never worse than absmax.
 * An all-zero group gets s = 1.
 *
 * ---- Arithmetic of the search (normative: every SIMD level and GPU port gives these bits) ----
 * f32 means IEEE-754 binary32, round to nearest even, no fused multiply-add, subnormals kept
 * (no flush-to-zero); f32(w) is the exact widening of an F16/BF16 weight. A "group" is the set
 * of weights sharing a scale: the tensor (absmax, tensor), a row (channel), or G consecutive
 * weights of a row (block:G). NaN/±Inf weights count as 0 in the search (they are refused
 * unless allow_nonfinite is set).
 *  1. amax = max |f32(w)| over the group; s_abs = amax / fp8_max (f32 division, fp8_max =
 *     57344 or 448). If amax == 0 or s_abs < 2^-124 the group's scale is 1 and nothing is
 *     searched. absmax mode: s = s_abs.
 *  2. n = feather_grid_size(grid) candidates, r_j = (float)(n + j) / (float)n (j < n, f32
 *     division: one octave [1, 2) in steps of 1/n; see feather_grid_ratios), s_j = s_abs * r_j
 *     and inv_j = 1.0f / s_j, both f32.
 *  3. Error of a weight: x = |f32(w)| * inv_j, q = the fp8 value of x under the codec's
 *     saturating round-to-nearest-even (fp8.h), p = s_j * q, d = |f32(w)| − p, e = d * d, and
 *     with importance e = e * imp[k]; each step one f32 operation. (The signed weight gives −d,
 *     the same e.) For 0 <= x < 2^20, q equals round(x) = min((x + M) − M, fp8_max) with M the
 *     f32 whose bits are max(bits(x) & 0x7f800000, EMIN) + OFF — EMIN = 0x38800000, OFF =
 *     21 << 23 for e5m2; EMIN = 0x3c800000, OFF = 20 << 23 for e4m3fn (checked exhaustively).
 *  4. Channel and block groups (and the rows of F32 tensor mode): 16 lane sums L_l, lane l
 *     taking the group's elements i ≡ l (mod 16), i counted from the group's start, added in
 *     increasing i to a sum starting at +0 (f32). Total T_j = c_0 + c_1 with a_l = L_l + L_{l+8}
 *     (l < 8), b_l = a_l + a_{l+4} (l < 4), c_l = b_l + b_{l+2} (l < 2), all f32:
 *       T = (((L0+L8)+(L4+L12)) + ((L2+L10)+(L6+L14))) + (((L1+L9)+(L5+L13)) + ((L3+L11)+(L7+L15))).
 *  5. Tensor mode: F16/BF16 weights are counted by 15-bit magnitude pattern h; c_h = the count,
 *     or with importance Σ iq[k] over the elements with pattern h, where
 *     iq[k] = floor(imp[k] / max_k imp[k] · 2^24 + 0.5) in double (all 0 if max imp = 0), so
 *     that every per-pattern sum is an exact integer. O_j = Σ over h = 1, 2, … in increasing
 *     order (skipping c_h = 0) of (double)c_h · (d_h · d_h), in double, with
 *     d_h = (double)w_h − (double)s_j · (double)q_h, q_h from step 3 (x = w_h * inv_j in f32).
 *     F32 weights: O_j = Σ over rows in increasing order, in double, of T_j of the row (step 4
 *     with the tensor's s_j).
 *  6. The scale is s_j for the smallest j whose T_j (f32) or O_j (double) is least, compared
 *     with '<' scanning j upwards (a NaN total never replaces an earlier candidate).
 * None of these sums depends on the thread count or the SIMD width.
 *
 * Default grid: 16 candidates. Measured on real and synthetic weights (BENCHMARKS.md,
 * "Quantisation quality"): ratios in [1, 2) beat clipping ranges such as (1/2, 1] at every
 * size, and 16 candidates reach 85–96% (e5m2) of the gain of 64 at a quarter of the cost.
 *
 * Packed layout: packed[kb][n][i] = Q[n][16·kb + i], byte offset (k/16)·16N + 16n + k%16.
 */
#ifndef FEATHER_QUANT_H
#define FEATHER_QUANT_H

#include "feather/feather.h"
#include "feather/fp8.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum feather_scale_mode {
    FEATHER_SCALE_NONE = 0,
    FEATHER_SCALE_ABSMAX,
    FEATHER_SCALE_TENSOR,
    FEATHER_SCALE_CHANNEL,
    FEATHER_SCALE_BLOCK
} feather_scale_mode;

/* Parses "none", "absmax", "tensor", "channel", "block:G". */
feather_status feather_scale_parse(const char *s, feather_scale_mode *mode, unsigned *group,
                                   feather_error *err);
/* Writes the canonical spelling ("block:128") into buf. */
const char *feather_scale_format(feather_scale_mode mode, unsigned group, char *buf, size_t len);

#define FEATHER_DEFAULT_GRID 0 /* 0 in options = the documented default grid */
#define FEATHER_GRID_DEFAULT_SIZE 16 /* candidates of the default grid */
#define FEATHER_GRID_MAX 256         /* largest grid accepted */

typedef struct feather_quant_options {
    feather_fp8 format;
    feather_scale_mode mode;
    unsigned group;            /* G for block:G: a multiple of 16 dividing K */
    unsigned grid;             /* number of candidates; 0 = default */
    const float *importance;   /* K non-negative weights, or NULL for uniform */
    int allow_nonfinite;       /* map NaN → 0 and ±Inf → ±max instead of failing */
    const char *name;          /* tensor name for messages, may be NULL */
} feather_quant_options;

/* The grid actually used for opts->grid (0 → default; values above FEATHER_GRID_MAX are clamped
 * here, while feather_scale_search rejects them). */
unsigned feather_grid_size(unsigned grid);
/* The candidate ratios r_j = (n + j) / n, j < n, of a grid of n candidates (r_0 = 1): for a
 * float format, scaling by 2 maps the grid onto itself (away from subnormals and saturation),
 * so one octave holds every distinct choice; ratios below 1 would also clip the largest
 * weights, which measured worse. */
void feather_grid_ratios(unsigned n, float *ratios);

/* Number of f32 scales for a (N, K) weight under opts (1, N or N·K/G), 0 if the shape
 * does not suit the mode (e.g. G does not divide K). */
uint64_t feather_scale_count(const feather_quant_options *opts, uint64_t n, uint64_t k);

typedef struct feather_quant_stats {
    uint64_t nonfinite;   /* NaN/Inf values seen (and mapped when allowed) */
    double sum_sq;        /* Σ w² over finite weights */
    double err_sq;        /* Σ (w − s·q)² over finite weights */
    double max_abs_err;   /* max |w − s·q| over finite weights */
} feather_quant_stats;

/* Chooses the scales of W (dtype F16, BF16 or F32) without quantising. */
feather_status feather_scale_search(feather_ctx *ctx, const feather_quant_options *opts,
                                    feather_dtype dtype, const void *w, uint64_t n, uint64_t k,
                                    float *scales, feather_error *err);

/* Search + cast (+ pack when packed != 0, which needs K % 16 == 0). q holds N·K bytes,
 * scales feather_scale_count() floats. stats may be NULL. Threads over the context. */
feather_status feather_quantize(feather_ctx *ctx, const feather_quant_options *opts,
                                feather_dtype dtype, const void *w, uint64_t n, uint64_t k,
                                int packed, uint8_t *q, float *scales,
                                feather_quant_stats *stats, feather_error *err);

/* feather_quantize on a device (feather.h). FEATHER_DEVICE_CPU is feather_quantize.
 * FEATHER_DEVICE_GPU runs the search, the cast and the packing on the GPU and returns the same
 * q and scales, bit for bit, for every mode, format, dtype, layout and importance (the kernels
 * perform the arithmetic above operation by operation); stats are computed there in the CPU's
 * order too (callers should still only expect them to agree to rounding). FEATHER_DEVICE_AUTO:
 * the GPU when one is usable, else the CPU, silently (programs that want to say so resolve the
 * device first with feather_device_select).
 * The weight streams through page-locked staging buffers in chunks of rows, the copies
 * overlapping the kernels; the context's threads copy between w/q and the staging buffers (ctx
 * may be NULL: the caller's thread). Tensor and absmax modes hold the whole weight on the
 * device (N·K·dtype-size bytes); the other modes a few chunks. The GPU work of all threads is
 * serialised; feather_gpu_release() frees what is kept on the device between calls.
 * Errors: those of feather_quantize, and FEATHER_E_UNSUPPORTED when the GPU is asked for but
 * this build has no GPU backend or no usable GPU is present, or when a GPU step fails (the
 * message names it). On any failure the contents of q and scales are unspecified. */
feather_status feather_quantize_on(feather_ctx *ctx, feather_device dev,
                                   const feather_quant_options *opts, feather_dtype dtype,
                                   const void *w, uint64_t n, uint64_t k, int packed, uint8_t *q,
                                   float *scales, feather_quant_stats *stats, feather_error *err);

/* Casts with given scales (no search): what feather_quantize does after choosing them.
 * scales: as for feather_scale_count (none/absmax/tensor use scales[0], NULL for none means
 * s = 1; channel scales[n]; block scales[n·K/G + k/G]); each must be positive and finite.
 * Every code is q = fp8(f32(w) · (1/s)) with 1/s rounded once to f32. NaN/±Inf weights make
 * it fail with FEATHER_E_INVALID unless opts->allow_nonfinite (then NaN → 0, ±Inf → ±max and
 * stats->nonfinite counts them); on any failure the contents of q are unspecified.
 * Speed: large outputs are written with streaming stores when q is 16-byte aligned (packed,
 * N % 4 == 0) or 64-byte aligned (plain, K % 64 == 0). Statistics are deterministic: the same
 * for any thread count, SIMD level and layout. */
feather_status feather_quantize_with(feather_ctx *ctx, const feather_quant_options *opts,
                                     feather_dtype dtype, const void *w, uint64_t n, uint64_t k,
                                     const float *scales, int packed, uint8_t *q,
                                     feather_quant_stats *stats, feather_error *err);

/* Layout conversions of N·K bytes; K % 16 == 0. Single-threaded. */
void feather_pack(const uint8_t *plain, uint64_t n, uint64_t k, uint8_t *packed);
void feather_unpack(const uint8_t *packed, uint64_t n, uint64_t k, uint8_t *plain);

/* Dequantises to f32 (N, K) row-major from plain or packed Q: out = f32(q) · s (one f32
 * multiply), s chosen by mode as for feather_quantize_with (scales may be NULL: s = 1). */
void feather_dequantize(const uint8_t *q, int packed, feather_fp8 fmt, feather_scale_mode mode,
                        unsigned group, const float *scales, uint64_t n, uint64_t k, float *out);

#ifdef __cplusplus
}
#endif
#endif

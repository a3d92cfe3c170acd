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

/* The grid actually used for opts->grid (0 → default). */
unsigned feather_grid_size(unsigned grid);
/* The candidate ratios r_0 … r_{n-1} (r_0 = 1) of a grid of n candidates. */
void feather_grid_ratios(unsigned n, float *ratios);

/* Number of f32 scales for a (N, K) weight under opts (1, N or N·K/G), 0 if the shape
 * does not suit the mode (e.g. G does not divide K). */
uint64_t feather_scale_count(const feather_quant_options *opts, uint64_t n, uint64_t k);

typedef struct feather_quant_stats {
    uint64_t nonfinite;   /* NaN/Inf values seen (and mapped when allowed) */
    double sum_sq;        /* Σ w² over finite weights */
    double err_sq;        /* Σ (w − s·q)² */
    double max_abs_err;   /* max |w − s·q| */
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

/* Casts with given scales (no search): what feather_quantize does after choosing them. */
feather_status feather_quantize_with(feather_ctx *ctx, const feather_quant_options *opts,
                                     feather_dtype dtype, const void *w, uint64_t n, uint64_t k,
                                     const float *scales, int packed, uint8_t *q,
                                     feather_quant_stats *stats, feather_error *err);

/* Layout conversions of N·K bytes; K % 16 == 0. */
void feather_pack(const uint8_t *plain, uint64_t n, uint64_t k, uint8_t *packed);
void feather_unpack(const uint8_t *packed, uint64_t n, uint64_t k, uint8_t *plain);

/* Dequantises to f32 (N, K) row-major from plain or packed Q. */
void feather_dequantize(const uint8_t *q, int packed, feather_fp8 fmt, feather_scale_mode mode,
                        unsigned group, const float *scales, uint64_t n, uint64_t k, float *out);

#ifdef __cplusplus
}
#endif
#endif

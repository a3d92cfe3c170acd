/* Internal interface of the scale search (scale.c and its SIMD kernels scale_avx2.c,
 * scale_avx512.c). The arithmetic is defined in include/feather/quant.h; every kernel here
 * computes exactly that, so the levels can be swapped without changing a single bit. */
#ifndef FEATHER_SCALE_INTERNAL_H
#define FEATHER_SCALE_INTERNAL_H

#include "internal.h"
#include "feather/quant.h"

/* Rounding |x| to the nearest fp8 value without leaving f32 (see quant.h, "round"):
 *   M = f32 with bits max(bits(x) & 0x7f800000, emin) + off;   v = min((x + M) - M, max). */
typedef struct scale_fmt {
    uint32_t emin; /* bits of the smallest normal, 2^-14 (e5m2) or 2^-6 (e4m3fn) */
    uint32_t off;  /* (23 - mantissa bits) << 23 */
    float max;     /* 57344 or 448 */
    float sat;     /* values below this round to at most max without the saturation: the
                      midpoint between max and the next value the exponent would have */
} scale_fmt;

static inline scale_fmt scale_fmt_of(feather_fp8 f) {
    scale_fmt r;
    if (f == FEATHER_FP8_E5M2) {
        r.emin = 0x38800000u;
        r.off = 21u << 23;
        r.max = FEATHER_E5M2_MAX;
        r.sat = 61440.0f; /* 1.875 · 2^15 */
    } else {
        r.emin = 0x3c800000u;
        r.off = 20u << 23;
        r.max = FEATHER_E4M3FN_MAX;
        r.sat = 464.0f; /* 1.8125 · 2^8 */
    }
    return r;
}

/* Smallest s_absmax that is searched; below it (only f32/bf16 weights under ~1e-33) the group
 * is treated like an all-zero one (s = 1), so that every candidate s_j = s_absmax·r_j with
 * r_j in [1/4, 4) is a normal f32 and 1/s_j is finite. */
#define SCALE_MIN_SABS 0x1p-124f

/* The SIMD-level kernels. All three levels produce identical bits.
 *
 * prep: converts len elements of src (F16/BF16/F32) to |w| as f32, non-finite values → 0,
 *   writes them to a[0 .. len) and zeros up to the next multiple of 16; returns the largest
 *   |w| in *amax, the smallest non-zero |w| in *amin (+Inf if none), and adds the number of
 *   NaN/Inf seen to *nonfinite.
 * cands: s[j] = s_abs * r[j], inv[j] = 1.0f / s[j] (f32, correctly rounded) for j < n.
 * errors: for j < n and k < len (len a multiple of 16), adds e = d·d (· imp[k]) with
 *   d = a[k] − s[j]·round(a[k]·inv[j]) to the lane sum acc[16·j + k % 16] in increasing k
 *   (acc NULL: sums start from 0 and are not stored); when tot is not NULL, writes
 *   tot[j] = tree(lanes of j) (quant.h).
 *   'clamps' says which steps of the rounding can matter for this data (SCALE_CLAMP_*); a
 *   kernel may skip the others, which gives the same bits (see scale_clamps). */
enum { SCALE_CLAMP_LOW = 1, SCALE_CLAMP_HIGH = 2 };
typedef void (*scale_prep_fn)(feather_dtype dt, const void *src, size_t len, float *a,
                              float *amax, float *amin, uint64_t *nonfinite);
typedef void (*scale_cands_fn)(float s_abs, const float *r, unsigned n, float *s, float *inv);
typedef void (*scale_errors_fn)(const float *a, const float *imp, size_t len, const float *s,
                                const float *inv, unsigned n, scale_fmt f, int clamps,
                                float *acc, float *tot);

/* Which clamps of the rounding can change a result, for values in [amin, amax] (plus zeros)
 * multiplied by inverse scales in [inv_lo, inv_hi]. fl(w·inv) is monotonic in w and in inv,
 * so checking the extremes covers every element and candidate:
 *   - the saturation min(·, max) is a no-op when fl(amax·inv_hi) < sat (rounding is
 *     monotonic, and below sat it gives at most max);
 *   - the floor max(exponent, emin) is a no-op when fl(amin·inv_lo) is a normal fp8 value
 *     (>= 2^emin); zeros need no floor: M is then 2^-106 and (0 + M) − M = 0. */
static inline int scale_clamps(float amax, float amin, float inv_lo, float inv_hi, scale_fmt f) {
    float lo, hi = amax * inv_hi, mn;
    int c = 0;
    __builtin_memcpy(&mn, &f.emin, 4);
    lo = amin * inv_lo;
    if (!(hi < f.sat)) c |= SCALE_CLAMP_HIGH;
    if (!(lo >= mn)) c |= SCALE_CLAMP_LOW;
    return c;
}

/* hist: tensor-mode objective over a histogram (quant.h step 5): for j < n,
 *   obj[j] = Σ_{i < nb, in order} wt[i] · (d·d), d = (double)vals[i] − (double)s[j]·(double)q,
 *   q = round(vals[i] · inv[j]); each candidate's sum is its own chain, so any number of
 *   candidates can be done side by side. */
typedef void (*scale_hist_fn)(const float *vals, const double *wt, size_t nb, const float *s,
                              const float *inv, unsigned n, scale_fmt f, double *obj);

typedef struct scale_kernels {
    scale_prep_fn prep;
    scale_cands_fn cands;
    scale_errors_fn errors;
    scale_hist_fn hist;
} scale_kernels;

void feather_scale_prep_scalar(feather_dtype dt, const void *src, size_t len, float *a,
                          float *amax, float *amin, uint64_t *nonfinite);
void feather_scale_cands_scalar(float s_abs, const float *r, unsigned n, float *s, float *inv);
void feather_scale_hist_scalar(const float *vals, const double *wt, size_t nb, const float *s,
                            const float *inv, unsigned n, scale_fmt f, double *obj);
void feather_scale_errors_scalar(const float *a, const float *imp, size_t len, const float *s,
                            const float *inv, unsigned n, scale_fmt f, int clamps, float *acc,
                            float *tot);
void feather_scale_prep_avx2(feather_dtype dt, const void *src, size_t len, float *a,
                          float *amax, float *amin, uint64_t *nonfinite);
void feather_scale_cands_avx2(float s_abs, const float *r, unsigned n, float *s, float *inv);
void feather_scale_hist_avx2(const float *vals, const double *wt, size_t nb, const float *s,
                            const float *inv, unsigned n, scale_fmt f, double *obj);
void feather_scale_errors_avx2(const float *a, const float *imp, size_t len, const float *s,
                            const float *inv, unsigned n, scale_fmt f, int clamps, float *acc,
                            float *tot);
void feather_scale_prep_avx512(feather_dtype dt, const void *src, size_t len, float *a,
                          float *amax, float *amin, uint64_t *nonfinite);
void feather_scale_cands_avx512(float s_abs, const float *r, unsigned n, float *s, float *inv);
void feather_scale_hist_avx512(const float *vals, const double *wt, size_t nb, const float *s,
                            const float *inv, unsigned n, scale_fmt f, double *obj);
void feather_scale_errors_avx512(const float *a, const float *imp, size_t len, const float *s,
                            const float *inv, unsigned n, scale_fmt f, int clamps, float *acc,
                            float *tot);

/* Kernels of a SIMD level (scalar when the level is not compiled in). */
scale_kernels feather_scale_kernels(feather_simd level);

/* The f32-domain rounding of one value (scalar reference of the kernels). */
static inline float feather_scale_round(float x, scale_fmt f) {
    uint32_t u, e;
    float m, v;
    __builtin_memcpy(&u, &x, 4);
    e = u & 0x7f800000u;
    e = (e > f.emin ? e : f.emin) + f.off;
    __builtin_memcpy(&m, &e, 4);
    v = (x + m) - m;
    return v < f.max ? v : f.max;
}

/* The 16-lane combination tree of quant.h. */
static inline float feather_scale_tree(const float l[16]) {
    float a[8], b[4];
    for (int i = 0; i < 8; i++) a[i] = l[i] + l[i + 8];
    for (int i = 0; i < 4; i++) b[i] = a[i] + a[i + 4];
    float c0 = b[0] + b[2], c1 = b[1] + b[3];
    return c0 + c1;
}

/* Index of the least objective; ties and NaN keep the earlier candidate (quant.h step 6). */
static inline unsigned feather_scale_argmin_d(const double *t, unsigned n) {
    unsigned b = 0;
    for (unsigned j = 1; j < n; j++)
        if (t[j] < t[b]) b = j;
    return b;
}

/* The option and shape checks of feather_scale_search (FEATHER_E_ARG with the rule broken). */
feather_status feather_scale_check_options(const feather_quant_options *opts, feather_dtype dtype,
                                           uint64_t n, uint64_t k, feather_error *err);

/* Tensor mode of 16-bit weights (quant.h step 5), split so that the counting can happen
 * elsewhere (the GPU counts, the host picks):
 * impq: the fixed-point importance iq[k] of step 5 for k weights;
 * hist_pick: from the counts of the 32768 magnitude patterns (c16 for small tensors, else cnt)
 * and, with importance, the sums of iq over each pattern (wsum), fails on NaN/Inf patterns
 * unless allowed and picks the scale (obj: the objectives, may be NULL). */
void feather_scale_impq(const float *imp, uint64_t k, uint32_t *out);
feather_status feather_scale_hist_pick(const feather_quant_options *opts, feather_dtype dtype,
                                       const uint16_t *c16, const uint64_t *cnt,
                                       const uint64_t *wsum, const float *ratios, unsigned nr,
                                       const scale_kernels *kn, float *scale, double *obj,
                                       feather_error *err);

/* Search with explicit candidate ratios (r[0] should be 1; every r in [1/4, 4)) instead of the
 * grid of opts->grid: used by the quality bench to compare grids. When obj is not NULL and the
 * mode is tensor, obj[j] receives the objective of candidate j. */
feather_status feather_scale_search_ratios(feather_ctx *ctx, const feather_quant_options *opts,
                                           feather_dtype dtype, const void *w, uint64_t n,
                                           uint64_t k, const float *ratios, unsigned nr,
                                           float *scales, double *obj, feather_error *err);

#endif

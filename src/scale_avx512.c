/* AVX-512 kernels of the scale search: one zmm register is exactly the 16 lanes of the error
 * sums defined in quant.h, so lane l of the accumulator is the sum of the elements k ≡ l
 * (mod 16) in increasing k, and the combination tree is the natural halving reduction.
 * Same results, bit for bit, as the scalar kernels in scale.c. */
#include "scale_internal.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>

/* Converts 16 elements at i (masked to the first 'n'): |w| as f32, NaN/Inf → 0. */
static inline __m512 load16(feather_dtype dt, const void *src, size_t i, unsigned n,
                            uint64_t *nf) {
    __mmask16 lm = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
    __m512i u;
    __mmask16 bad;
    if (dt == FEATHER_F16 || dt == FEATHER_BF16) {
        __m256i h = _mm256_maskz_loadu_epi16(lm, (const uint16_t *)src + i);
        h = _mm256_and_si256(h, _mm256_set1_epi16(0x7fff));
        bad = _mm256_cmpge_epu16_mask(h, _mm256_set1_epi16(dt == FEATHER_F16 ? 0x7c00 : 0x7f80));
        h = _mm256_maskz_mov_epi16((__mmask16)~bad, h);
        *nf += (uint64_t)__builtin_popcount(bad);
        if (dt == FEATHER_F16) return _mm512_cvtph_ps(h);
        u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    } else {
        u = _mm512_maskz_loadu_epi32(lm, (const float *)src + i);
        u = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
        bad = _mm512_cmpge_epu32_mask(u, _mm512_set1_epi32(0x7f800000));
        u = _mm512_maskz_mov_epi32((__mmask16)~bad, u);
        *nf += (uint64_t)__builtin_popcount(bad);
    }
    return _mm512_castsi512_ps(u);
}

void feather_scale_prep_avx512(feather_dtype dt, const void *src, size_t len, float *a,
                               float *amax, float *amin, uint64_t *nonfinite) {
    __m512 m = _mm512_setzero_ps(), mn = _mm512_set1_ps(__builtin_inff());
    uint64_t nf = 0;
    for (size_t i = 0; i < len; i += 16) {
        size_t rest = len - i;
        __m512 v = load16(dt, src, i, rest >= 16 ? 16 : (unsigned)rest, &nf);
        _mm512_storeu_ps(a + i, v); /* the zeros past len are the padding */
        m = _mm512_max_ps(m, v);
        mn = _mm512_mask_min_ps(mn, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GT_OQ), mn, v);
    }
    *amax = _mm512_reduce_max_ps(m);
    *amin = _mm512_reduce_min_ps(mn);
    *nonfinite += nf;
}

void feather_scale_cands_avx512(float s_abs, const float *r, unsigned n, float *s, float *inv) {
    __m512 sa = _mm512_set1_ps(s_abs), one = _mm512_set1_ps(1.0f);
    for (unsigned j = 0; j < n; j += 16) {
        __mmask16 m = (__mmask16)(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1);
        __m512 sj = _mm512_mul_ps(sa, _mm512_maskz_loadu_ps(m, r + j));
        __m512 ij = _mm512_maskz_div_ps(m, one, sj);
        _mm512_mask_storeu_ps(s + j, m, sj);
        _mm512_mask_storeu_ps(inv + j, m, ij);
    }
}

/* Histogram objective: 16 candidates per pass, one per f32 lane, their double sums in two
 * registers of 8; the bins are visited in order, so each sum is the scalar chain. */
void feather_scale_hist_avx512(const float *vals, const double *wt, size_t nb, const float *s,
                               const float *inv, unsigned n, scale_fmt f, double *obj) {
    const __m512i expm = _mm512_set1_epi32(0x7f800000), emin = _mm512_set1_epi32((int)f.emin),
                  off = _mm512_set1_epi32((int)f.off);
    const __m512 mx = _mm512_set1_ps(f.max);
    for (unsigned j = 0; j < n; j += 16) {
        __mmask16 m = (__mmask16)(n - j >= 16 ? 0xffff : (1u << (n - j)) - 1);
        __m512 iv = _mm512_maskz_loadu_ps(m, inv + j), sv = _mm512_maskz_loadu_ps(m, s + j);
        __m512d slo = _mm512_cvtps_pd(_mm512_castps512_ps256(sv)),
                shi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sv), 1)));
        __m512d alo = _mm512_setzero_pd(), ahi = _mm512_setzero_pd();
        for (size_t i = 0; i < nb; i++) {
            __m512 w = _mm512_set1_ps(vals[i]);
            __m512d wd = _mm512_set1_pd((double)vals[i]), c = _mm512_set1_pd(wt[i]);
            __m512 x = _mm512_mul_ps(w, iv);
            __m512i e = _mm512_max_epu32(_mm512_and_si512(_mm512_castps_si512(x), expm), emin);
            __m512 mm = _mm512_castsi512_ps(_mm512_add_epi32(e, off));
            __m512 v = _mm512_min_ps(_mm512_sub_ps(_mm512_add_ps(x, mm), mm), mx);
            __m512d vlo = _mm512_cvtps_pd(_mm512_castps512_ps256(v)),
                    vhi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
            __m512d dlo = _mm512_sub_pd(wd, _mm512_mul_pd(slo, vlo)),
                    dhi = _mm512_sub_pd(wd, _mm512_mul_pd(shi, vhi));
            alo = _mm512_add_pd(alo, _mm512_mul_pd(c, _mm512_mul_pd(dlo, dlo)));
            ahi = _mm512_add_pd(ahi, _mm512_mul_pd(c, _mm512_mul_pd(dhi, dhi)));
        }
        double t[16];
        _mm512_storeu_pd(t, alo);
        _mm512_storeu_pd(t + 8, ahi);
        for (unsigned q = 0; q < 16 && j + q < n; q++) obj[j + q] = t[q];
    }
}

/* The combination tree of quant.h, (l, l+8), (l, l+4), (l, l+2), (0, 1), for one register. */
static inline float tree1(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));
    return _mm_cvtss_f32(d);
}

/* The same tree for four registers at once (same additions, same operands): the 128-bit
 * quarters are regrouped so that every add instruction serves all four. */
static inline void tree4(__m512 v0, __m512 v1, __m512 v2, __m512 v3, float *out) {
    /* (l, l+8): quarters 0,1 + quarters 2,3 of each, two candidates per register */
    __m512 t01 = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x44), _mm512_shuffle_f32x4(v0, v1, 0xee));
    __m512 t23 = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, 0x44), _mm512_shuffle_f32x4(v2, v3, 0xee));
    /* (l, l+4): quarter 0 + quarter 1 of each half; one candidate per quarter */
    __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xdd));
    /* (l, l+2) and (0, 1) inside each quarter */
    __m512 c = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4e));
    __m512 d = _mm512_add_ps(c, _mm512_permute_ps(c, 0xb1));
    /* lane 0 of each quarter */
    __m128 r = _mm512_castps512_ps128(
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), d));
    _mm_storeu_ps(out, r);
}

/* One step: acc += (w − s·round(w·inv))² [· imp], every operation rounded in f32. The floor
 * and the saturation of the rounding are compiled in only where they can matter. */
#define STEP(acc, s, inv)                                                                   \
    do {                                                                                    \
        __m512 x_ = _mm512_mul_ps(w, inv);                                                  \
        __m512i e_ = _mm512_and_si512(_mm512_castps_si512(x_), expm);                       \
        if (low) e_ = _mm512_max_epu32(e_, emin);                                           \
        __m512 m_ = _mm512_castsi512_ps(_mm512_add_epi32(e_, off));                         \
        __m512 v_ = _mm512_sub_ps(_mm512_add_ps(x_, m_), m_);                               \
        if (high) v_ = _mm512_min_ps(v_, mx);                                               \
        __m512 d_ = _mm512_sub_ps(w, _mm512_mul_ps(s, v_));                                 \
        __m512 q_ = _mm512_mul_ps(d_, d_);                                                  \
        if (use_imp) q_ = _mm512_mul_ps(q_, iw);                                            \
        acc = _mm512_add_ps(acc, q_);                                                       \
    } while (0)

#define LOADACC(r, j) (acc ? _mm512_loadu_ps(acc + 16 * (j)) : _mm512_setzero_ps())

/* Written once, instantiated for each combination of the constant flags. */
static inline __attribute__((always_inline)) void
errors(const float *a, const float *imp, size_t len, const float *s, const float *inv,
       unsigned n, scale_fmt f, float *acc, float *tot, const int use_imp, const int low,
       const int high) {
    const __m512i expm = _mm512_set1_epi32(0x7f800000), emin = _mm512_set1_epi32((int)f.emin),
                  off = _mm512_set1_epi32((int)f.off);
    const __m512 mx = _mm512_set1_ps(f.max);
    unsigned j = 0;
    /* four candidates at a time: independent accumulators hide the add latency */
    for (; j + 4 <= n; j += 4) {
        __m512 a0 = LOADACC(a0, j), a1 = LOADACC(a1, j + 1), a2 = LOADACC(a2, j + 2),
               a3 = LOADACC(a3, j + 3);
        __m512 s0 = _mm512_set1_ps(s[j]), s1 = _mm512_set1_ps(s[j + 1]),
               s2 = _mm512_set1_ps(s[j + 2]), s3 = _mm512_set1_ps(s[j + 3]);
        __m512 i0 = _mm512_set1_ps(inv[j]), i1 = _mm512_set1_ps(inv[j + 1]),
               i2 = _mm512_set1_ps(inv[j + 2]), i3 = _mm512_set1_ps(inv[j + 3]);
        for (size_t k = 0; k < len; k += 16) {
            __m512 w = _mm512_loadu_ps(a + k);
            __m512 iw = use_imp ? _mm512_loadu_ps(imp + k) : w;
            STEP(a0, s0, i0);
            STEP(a1, s1, i1);
            STEP(a2, s2, i2);
            STEP(a3, s3, i3);
        }
        if (acc) {
            _mm512_storeu_ps(acc + 16 * j, a0);
            _mm512_storeu_ps(acc + 16 * j + 16, a1);
            _mm512_storeu_ps(acc + 16 * j + 32, a2);
            _mm512_storeu_ps(acc + 16 * j + 48, a3);
        }
        if (tot) tree4(a0, a1, a2, a3, tot + j);
    }
    for (; j < n; j++) {
        __m512 a0 = LOADACC(a0, j);
        __m512 s0 = _mm512_set1_ps(s[j]), i0 = _mm512_set1_ps(inv[j]);
        for (size_t k = 0; k < len; k += 16) {
            __m512 w = _mm512_loadu_ps(a + k);
            __m512 iw = use_imp ? _mm512_loadu_ps(imp + k) : w;
            STEP(a0, s0, i0);
        }
        if (acc) _mm512_storeu_ps(acc + 16 * j, a0);
        if (tot) tot[j] = tree1(a0);
    }
}

#define VARIANT(i, l, h)                                                                    \
    static void errors_##i##l##h(const float *a, const float *imp, size_t len, const float *s, \
                                 const float *inv, unsigned n, scale_fmt f, float *acc,     \
                                 float *tot) {                                              \
        errors(a, imp, len, s, inv, n, f, acc, tot, i, l, h);                               \
    }
VARIANT(0, 0, 0)
VARIANT(0, 0, 1)
VARIANT(0, 1, 0)
VARIANT(0, 1, 1)
VARIANT(1, 0, 0)
VARIANT(1, 0, 1)
VARIANT(1, 1, 0)
VARIANT(1, 1, 1)

void feather_scale_errors_avx512(const float *a, const float *imp, size_t len, const float *s,
                                 const float *inv, unsigned n, scale_fmt f, int clamps,
                                 float *acc, float *tot) {
    typedef void (*fn)(const float *, const float *, size_t, const float *, const float *,
                       unsigned, scale_fmt, float *, float *);
    static const fn v[8] = {errors_000, errors_001, errors_010, errors_011,
                            errors_100, errors_101, errors_110, errors_111};
    int low = (clamps & SCALE_CLAMP_LOW) != 0, high = (clamps & SCALE_CLAMP_HIGH) != 0;
    v[(imp ? 4 : 0) + low * 2 + high](a, imp, len, s, inv, n, f, acc, tot);
}

#else
/* Not an x86 build with AVX-512: the scalar kernels stand in (never selected at run time). */
void feather_scale_prep_avx512(feather_dtype dt, const void *src, size_t len, float *a,
                               float *amax, float *amin, uint64_t *nonfinite) {
    feather_scale_prep_scalar(dt, src, len, a, amax, amin, nonfinite);
}
void feather_scale_cands_avx512(float s_abs, const float *r, unsigned n, float *s, float *inv) {
    feather_scale_cands_scalar(s_abs, r, n, s, inv);
}
void feather_scale_hist_avx512(const float *vals, const double *wt, size_t nb, const float *s,
                               const float *inv, unsigned n, scale_fmt f, double *obj) {
    feather_scale_hist_scalar(vals, wt, nb, s, inv, n, f, obj);
}
void feather_scale_errors_avx512(const float *a, const float *imp, size_t len, const float *s,
                                 const float *inv, unsigned n, scale_fmt f, int clamps,
                                 float *acc, float *tot) {
    feather_scale_errors_scalar(a, imp, len, s, inv, n, f, clamps, acc, tot);
}
#endif

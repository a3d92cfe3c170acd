/* AVX2 kernels of the scale search. The 16 lanes of the error sums defined in quant.h are
 * held in two ymm registers: 'lo' = lanes 0..7 (elements k ≡ 0..7 mod 16), 'hi' = lanes
 * 8..15; the first step of the combination tree, lane l + lane l+8, is then lo + hi.
 * Same results, bit for bit, as the scalar kernels in scale.c. */
#include "scale_internal.h"

#include <string.h>

#if defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

/* 8 elements at i: |w| as f32, NaN/Inf → 0. */
static inline __m256 load8(feather_dtype dt, const void *src, size_t i, uint64_t *nf) {
    __m256i u;
    if (dt == FEATHER_F16 || dt == FEATHER_BF16) {
        __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + i));
        h = _mm_and_si128(h, _mm_set1_epi16(0x7fff));
        /* patterns are below 0x8000, so a signed compare is an unsigned one */
        __m128i bad = _mm_cmpgt_epi16(h, _mm_set1_epi16(dt == FEATHER_F16 ? 0x7bff : 0x7f7f));
        h = _mm_andnot_si128(bad, h);
        *nf += (uint64_t)__builtin_popcount((unsigned)_mm_movemask_epi8(bad)) / 2;
        if (dt == FEATHER_F16) return _mm256_cvtph_ps(h);
        u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    } else {
        u = _mm256_loadu_si256((const __m256i *)((const float *)src + i));
        u = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
        __m256i bad = _mm256_cmpgt_epi32(u, _mm256_set1_epi32(0x7f7fffff));
        u = _mm256_andnot_si256(bad, u);
        *nf += (uint64_t)__builtin_popcount((unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(bad)));
    }
    return _mm256_castsi256_ps(u);
}

void feather_scale_prep_avx2(feather_dtype dt, const void *src, size_t len, float *a,
                             float *amax, float *amin, uint64_t *nonfinite) {
    const __m256 inf = _mm256_set1_ps(__builtin_inff()), zero = _mm256_setzero_ps();
    __m256 m = zero, mn = inf;
    uint64_t nf = 0;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        __m256 v = load8(dt, src, i, &nf);
        _mm256_storeu_ps(a + i, v);
        m = _mm256_max_ps(m, v);
        /* zeros do not count for the smallest magnitude */
        mn = _mm256_min_ps(mn, _mm256_blendv_ps(inf, v, _mm256_cmp_ps(v, zero, _CMP_GT_OQ)));
    }
    float mm[8], nn[8];
    _mm256_storeu_ps(mm, m);
    _mm256_storeu_ps(nn, mn);
    float r = 0, rn = __builtin_inff();
    for (int l = 0; l < 8; l++) {
        r = mm[l] > r ? mm[l] : r;
        rn = nn[l] < rn ? nn[l] : rn;
    }
    if (i < len) { /* the last few elements */
        float t[16], tm, tn;
        feather_scale_prep_scalar(dt, (const uint8_t *)src + i * (dt == FEATHER_F32 ? 4 : 2),
                                  len - i, t, &tm, &tn, &nf);
        memcpy(a + i, t, sizeof(float) * (len - i));
        r = tm > r ? tm : r;
        rn = tn < rn ? tn : rn;
        i = len;
    }
    for (; i % 16; i++) a[i] = 0; /* padding */
    *amax = r;
    *amin = rn;
    *nonfinite += nf;
}

void feather_scale_cands_avx2(float s_abs, const float *r, unsigned n, float *s, float *inv) {
    __m256 sa = _mm256_set1_ps(s_abs), one = _mm256_set1_ps(1.0f);
    unsigned j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 sj = _mm256_mul_ps(sa, _mm256_loadu_ps(r + j));
        _mm256_storeu_ps(s + j, sj);
        _mm256_storeu_ps(inv + j, _mm256_div_ps(one, sj));
    }
    feather_scale_cands_scalar(s_abs, r + j, n - j, s + j, inv + j);
}

/* Histogram objective: 8 candidates per pass, one per f32 lane, their double sums in two
 * registers of 4; the bins are visited in order, so each sum is the scalar chain. */
void feather_scale_hist_avx2(const float *vals, const double *wt, size_t nb, const float *s,
                             const float *inv, unsigned n, scale_fmt f, double *obj) {
    const __m256i expm = _mm256_set1_epi32(0x7f800000), emin = _mm256_set1_epi32((int)f.emin),
                  off = _mm256_set1_epi32((int)f.off);
    const __m256 mx = _mm256_set1_ps(f.max);
    for (unsigned j = 0; j < n; j += 8) {
        float ib[8] = {0}, sb[8] = {0};
        for (unsigned q = 0; q < 8 && j + q < n; q++) {
            ib[q] = inv[j + q];
            sb[q] = s[j + q];
        }
        __m256 iv = _mm256_loadu_ps(ib), sv = _mm256_loadu_ps(sb);
        __m256d slo = _mm256_cvtps_pd(_mm256_castps256_ps128(sv)),
                shi = _mm256_cvtps_pd(_mm256_extractf128_ps(sv, 1));
        __m256d alo = _mm256_setzero_pd(), ahi = _mm256_setzero_pd();
        for (size_t i = 0; i < nb; i++) {
            __m256 w = _mm256_set1_ps(vals[i]);
            __m256d wd = _mm256_set1_pd((double)vals[i]), c = _mm256_set1_pd(wt[i]);
            __m256 x = _mm256_mul_ps(w, iv);
            __m256i e = _mm256_max_epu32(_mm256_and_si256(_mm256_castps_si256(x), expm), emin);
            __m256 mm = _mm256_castsi256_ps(_mm256_add_epi32(e, off));
            __m256 v = _mm256_min_ps(_mm256_sub_ps(_mm256_add_ps(x, mm), mm), mx);
            __m256d vlo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                    vhi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
            __m256d dlo = _mm256_sub_pd(wd, _mm256_mul_pd(slo, vlo)),
                    dhi = _mm256_sub_pd(wd, _mm256_mul_pd(shi, vhi));
            alo = _mm256_add_pd(alo, _mm256_mul_pd(c, _mm256_mul_pd(dlo, dlo)));
            ahi = _mm256_add_pd(ahi, _mm256_mul_pd(c, _mm256_mul_pd(dhi, dhi)));
        }
        double t[8];
        _mm256_storeu_pd(t, alo);
        _mm256_storeu_pd(t + 4, ahi);
        for (unsigned q = 0; q < 8 && j + q < n; q++) obj[j + q] = t[q];
    }
}

/* The combination tree of quant.h on lanes lo (0..7) and hi (8..15). */
static inline float tree16(__m256 lo, __m256 hi) {
    __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));
    return _mm_cvtss_f32(d);
}

/* One step: acc += (w − s·round(w·inv))² [· imp], every operation rounded in f32. The floor
 * and the saturation of the rounding are compiled in only where they can matter. */
#define STEP(acc, w, iw, s, inv)                                                            \
    do {                                                                                    \
        __m256 x_ = _mm256_mul_ps(w, inv);                                                  \
        __m256i e_ = _mm256_and_si256(_mm256_castps_si256(x_), expm);                       \
        if (low) e_ = _mm256_max_epu32(e_, emin);                                           \
        __m256 m_ = _mm256_castsi256_ps(_mm256_add_epi32(e_, off));                         \
        __m256 v_ = _mm256_sub_ps(_mm256_add_ps(x_, m_), m_);                               \
        if (high) v_ = _mm256_min_ps(v_, mx);                                               \
        __m256 d_ = _mm256_sub_ps(w, _mm256_mul_ps(s, v_));                                 \
        __m256 q_ = _mm256_mul_ps(d_, d_);                                                  \
        if (use_imp) q_ = _mm256_mul_ps(q_, iw);                                            \
        acc = _mm256_add_ps(acc, q_);                                                       \
    } while (0)

#define LOADACC(off8) (acc ? _mm256_loadu_ps(acc + (off8)) : _mm256_setzero_ps())

static inline __attribute__((always_inline)) void
errors(const float *a, const float *imp, size_t len, const float *s, const float *inv,
       unsigned n, scale_fmt f, float *acc, float *tot, const int use_imp, const int low,
       const int high) {
    const __m256i expm = _mm256_set1_epi32(0x7f800000), emin = _mm256_set1_epi32((int)f.emin),
                  off = _mm256_set1_epi32((int)f.off);
    const __m256 mx = _mm256_set1_ps(f.max);
    unsigned j = 0;
    /* two candidates at a time (four accumulators): as many as 16 registers allow */
    for (; j + 2 <= n; j += 2) {
        size_t c0 = 16 * (size_t)j, c1 = c0 + 16;
        __m256 l0 = LOADACC(c0), h0 = LOADACC(c0 + 8), l1 = LOADACC(c1), h1 = LOADACC(c1 + 8);
        __m256 s0 = _mm256_set1_ps(s[j]), s1 = _mm256_set1_ps(s[j + 1]);
        __m256 i0 = _mm256_set1_ps(inv[j]), i1 = _mm256_set1_ps(inv[j + 1]);
        for (size_t k = 0; k < len; k += 16) {
            __m256 wl = _mm256_loadu_ps(a + k), wh = _mm256_loadu_ps(a + k + 8);
            __m256 il = use_imp ? _mm256_loadu_ps(imp + k) : wl;
            __m256 ih = use_imp ? _mm256_loadu_ps(imp + k + 8) : wh;
            STEP(l0, wl, il, s0, i0);
            STEP(h0, wh, ih, s0, i0);
            STEP(l1, wl, il, s1, i1);
            STEP(h1, wh, ih, s1, i1);
        }
        if (acc) {
            _mm256_storeu_ps(acc + c0, l0);
            _mm256_storeu_ps(acc + c0 + 8, h0);
            _mm256_storeu_ps(acc + c1, l1);
            _mm256_storeu_ps(acc + c1 + 8, h1);
        }
        if (tot) {
            tot[j] = tree16(l0, h0);
            tot[j + 1] = tree16(l1, h1);
        }
    }
    for (; j < n; j++) {
        size_t c0 = 16 * (size_t)j;
        __m256 l0 = LOADACC(c0), h0 = LOADACC(c0 + 8);
        __m256 s0 = _mm256_set1_ps(s[j]), i0 = _mm256_set1_ps(inv[j]);
        for (size_t k = 0; k < len; k += 16) {
            __m256 wl = _mm256_loadu_ps(a + k), wh = _mm256_loadu_ps(a + k + 8);
            __m256 il = use_imp ? _mm256_loadu_ps(imp + k) : wl;
            __m256 ih = use_imp ? _mm256_loadu_ps(imp + k + 8) : wh;
            STEP(l0, wl, il, s0, i0);
            STEP(h0, wh, ih, s0, i0);
        }
        if (acc) {
            _mm256_storeu_ps(acc + c0, l0);
            _mm256_storeu_ps(acc + c0 + 8, h0);
        }
        if (tot) tot[j] = tree16(l0, h0);
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

void feather_scale_errors_avx2(const float *a, const float *imp, size_t len, const float *s,
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
/* Not an x86 build with AVX2: the scalar kernels stand in (never selected at run time). */
void feather_scale_prep_avx2(feather_dtype dt, const void *src, size_t len, float *a,
                             float *amax, float *amin, uint64_t *nonfinite) {
    feather_scale_prep_scalar(dt, src, len, a, amax, amin, nonfinite);
}
void feather_scale_cands_avx2(float s_abs, const float *r, unsigned n, float *s, float *inv) {
    feather_scale_cands_scalar(s_abs, r, n, s, inv);
}
void feather_scale_hist_avx2(const float *vals, const double *wt, size_t nb, const float *s,
                             const float *inv, unsigned n, scale_fmt f, double *obj) {
    feather_scale_hist_scalar(vals, wt, nb, s, inv, n, f, obj);
}
void feather_scale_errors_avx2(const float *a, const float *imp, size_t len, const float *s,
                               const float *inv, unsigned n, scale_fmt f, int clamps,
                               float *acc, float *tot) {
    feather_scale_errors_scalar(a, imp, len, s, inv, n, f, clamps, acc, tot);
}
#endif

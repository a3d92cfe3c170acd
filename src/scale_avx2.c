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
                             float *amax, uint64_t *nonfinite) {
    __m256 m = _mm256_setzero_ps();
    uint64_t nf = 0;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        __m256 v = load8(dt, src, i, &nf);
        _mm256_storeu_ps(a + i, v);
        m = _mm256_max_ps(m, v);
    }
    float mm[8];
    _mm256_storeu_ps(mm, m);
    float r = 0;
    for (int l = 0; l < 8; l++) r = mm[l] > r ? mm[l] : r;
    if (i < len) { /* the last few elements */
        float t[16], tm;
        feather_scale_prep_scalar(dt, (const uint8_t *)src + i * (dt == FEATHER_F32 ? 4 : 2),
                                  len - i, t, &tm, &nf);
        memcpy(a + i, t, sizeof(float) * (len - i));
        r = tm > r ? tm : r;
        i = len;
    }
    for (; i % 16; i++) a[i] = 0; /* padding */
    *amax = r;
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

/* The combination tree of quant.h on lanes lo (0..7) and hi (8..15). */
static inline float tree16(__m256 lo, __m256 hi) {
    __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));
    return _mm_cvtss_f32(d);
}

#define STEP(acc, w, iw, s, inv)                                                            \
    do {                                                                                    \
        __m256 x_ = _mm256_mul_ps(w, inv);                                                  \
        __m256i e_ = _mm256_and_si256(_mm256_castps_si256(x_), expm);                       \
        e_ = _mm256_add_epi32(_mm256_max_epu32(e_, emin), off);                             \
        __m256 m_ = _mm256_castsi256_ps(e_);                                                \
        __m256 v_ = _mm256_min_ps(_mm256_sub_ps(_mm256_add_ps(x_, m_), m_), mx);            \
        __m256 d_ = _mm256_sub_ps(w, _mm256_mul_ps(s, v_));                                 \
        __m256 q_ = _mm256_mul_ps(d_, d_);                                                  \
        if (use_imp) q_ = _mm256_mul_ps(q_, iw);                                            \
        acc = _mm256_add_ps(acc, q_);                                                       \
    } while (0)

static inline __attribute__((always_inline)) void
errors(const float *a, const float *imp, size_t len, const float *s, const float *inv,
       unsigned n, scale_fmt f, float *acc, float *tot, const int use_imp) {
    const __m256i expm = _mm256_set1_epi32(0x7f800000), emin = _mm256_set1_epi32((int)f.emin),
                  off = _mm256_set1_epi32((int)f.off);
    const __m256 mx = _mm256_set1_ps(f.max);
    unsigned j = 0;
    /* two candidates at a time (four accumulators): as many as 16 registers allow */
    for (; j + 2 <= n; j += 2) {
        float *c0 = acc + 16 * j, *c1 = c0 + 16;
        __m256 l0 = _mm256_loadu_ps(c0), h0 = _mm256_loadu_ps(c0 + 8);
        __m256 l1 = _mm256_loadu_ps(c1), h1 = _mm256_loadu_ps(c1 + 8);
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
        _mm256_storeu_ps(c0, l0);
        _mm256_storeu_ps(c0 + 8, h0);
        _mm256_storeu_ps(c1, l1);
        _mm256_storeu_ps(c1 + 8, h1);
        if (tot) {
            tot[j] = tree16(l0, h0);
            tot[j + 1] = tree16(l1, h1);
        }
    }
    for (; j < n; j++) {
        float *c0 = acc + 16 * j;
        __m256 l0 = _mm256_loadu_ps(c0), h0 = _mm256_loadu_ps(c0 + 8);
        __m256 s0 = _mm256_set1_ps(s[j]), i0 = _mm256_set1_ps(inv[j]);
        for (size_t k = 0; k < len; k += 16) {
            __m256 wl = _mm256_loadu_ps(a + k), wh = _mm256_loadu_ps(a + k + 8);
            __m256 il = use_imp ? _mm256_loadu_ps(imp + k) : wl;
            __m256 ih = use_imp ? _mm256_loadu_ps(imp + k + 8) : wh;
            STEP(l0, wl, il, s0, i0);
            STEP(h0, wh, ih, s0, i0);
        }
        _mm256_storeu_ps(c0, l0);
        _mm256_storeu_ps(c0 + 8, h0);
        if (tot) tot[j] = tree16(l0, h0);
    }
}

void feather_scale_errors_avx2(const float *a, const float *imp, size_t len, const float *s,
                               const float *inv, unsigned n, scale_fmt f, float *acc,
                               float *tot) {
    if (imp) errors(a, imp, len, s, inv, n, f, acc, tot, 1);
    else errors(a, NULL, len, s, inv, n, f, acc, tot, 0);
}

#else
/* Not an x86 build with AVX2: the scalar kernels stand in (never selected at run time). */
void feather_scale_prep_avx2(feather_dtype dt, const void *src, size_t len, float *a,
                             float *amax, uint64_t *nonfinite) {
    feather_scale_prep_scalar(dt, src, len, a, amax, nonfinite);
}
void feather_scale_cands_avx2(float s_abs, const float *r, unsigned n, float *s, float *inv) {
    feather_scale_cands_scalar(s_abs, r, n, s, inv);
}
void feather_scale_errors_avx2(const float *a, const float *imp, size_t len, const float *s,
                               const float *inv, unsigned n, scale_fmt f, float *acc,
                               float *tot) {
    feather_scale_errors_scalar(a, imp, len, s, inv, n, f, acc, tot);
}
#endif

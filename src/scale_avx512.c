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
                               float *amax, uint64_t *nonfinite) {
    __m512 m = _mm512_setzero_ps();
    uint64_t nf = 0;
    for (size_t i = 0; i < len; i += 16) {
        size_t rest = len - i;
        __m512 v = load16(dt, src, i, rest >= 16 ? 16 : (unsigned)rest, &nf);
        _mm512_storeu_ps(a + i, v); /* the zeros past len are the padding */
        m = _mm512_max_ps(m, v);
    }
    *amax = _mm512_reduce_max_ps(m);
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

/* The combination tree of quant.h: (l, l+8), then (l, l+4), (l, l+2), (0, 1). */
static inline float tree16(__m512 v) {
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    __m128 d = _mm_add_ss(c, _mm_shuffle_ps(c, c, 1));
    return _mm_cvtss_f32(d);
}

/* One step: acc += (w − s·round(w·inv))² [· imp], every operation rounded in f32. */
#define STEP(acc, s, inv)                                                                   \
    do {                                                                                    \
        __m512 x_ = _mm512_mul_ps(w, inv);                                                  \
        __m512i e_ = _mm512_and_si512(_mm512_castps_si512(x_), expm);                       \
        e_ = _mm512_add_epi32(_mm512_max_epu32(e_, emin), off);                             \
        __m512 m_ = _mm512_castsi512_ps(e_);                                                \
        __m512 v_ = _mm512_min_ps(_mm512_sub_ps(_mm512_add_ps(x_, m_), m_), mx);            \
        __m512 d_ = _mm512_sub_ps(w, _mm512_mul_ps(s, v_));                                 \
        __m512 q_ = _mm512_mul_ps(d_, d_);                                                  \
        if (use_imp) q_ = _mm512_mul_ps(q_, iw);                                                \
        acc = _mm512_add_ps(acc, q_);                                                       \
    } while (0)

/* Written once, instantiated with and without importance weights (use_imp is a constant). */
static inline __attribute__((always_inline)) void
errors(const float *a, const float *imp, size_t len, const float *s, const float *inv,
       unsigned n, scale_fmt f, float *acc, float *tot, const int use_imp) {
    const __m512i expm = _mm512_set1_epi32(0x7f800000), emin = _mm512_set1_epi32((int)f.emin),
                  off = _mm512_set1_epi32((int)f.off);
    const __m512 mx = _mm512_set1_ps(f.max);
    unsigned j = 0;
    /* four candidates at a time: independent accumulators hide the add latency */
    for (; j + 4 <= n; j += 4) {
        __m512 a0 = _mm512_loadu_ps(acc + 16 * j), a1 = _mm512_loadu_ps(acc + 16 * j + 16),
               a2 = _mm512_loadu_ps(acc + 16 * j + 32), a3 = _mm512_loadu_ps(acc + 16 * j + 48);
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
        _mm512_storeu_ps(acc + 16 * j, a0);
        _mm512_storeu_ps(acc + 16 * j + 16, a1);
        _mm512_storeu_ps(acc + 16 * j + 32, a2);
        _mm512_storeu_ps(acc + 16 * j + 48, a3);
        if (tot) {
            tot[j] = tree16(a0);
            tot[j + 1] = tree16(a1);
            tot[j + 2] = tree16(a2);
            tot[j + 3] = tree16(a3);
        }
    }
    for (; j < n; j++) {
        __m512 a0 = _mm512_loadu_ps(acc + 16 * j);
        __m512 s0 = _mm512_set1_ps(s[j]), i0 = _mm512_set1_ps(inv[j]);
        for (size_t k = 0; k < len; k += 16) {
            __m512 w = _mm512_loadu_ps(a + k);
            __m512 iw = use_imp ? _mm512_loadu_ps(imp + k) : w;
            STEP(a0, s0, i0);
        }
        _mm512_storeu_ps(acc + 16 * j, a0);
        if (tot) tot[j] = tree16(a0);
    }
}

void feather_scale_errors_avx512(const float *a, const float *imp, size_t len, const float *s,
                                 const float *inv, unsigned n, scale_fmt f, float *acc,
                                 float *tot) {
    if (imp) errors(a, imp, len, s, inv, n, f, acc, tot, 1);
    else errors(a, NULL, len, s, inv, n, f, acc, tot, 0);
}

#else
/* Not an x86 build with AVX-512: the scalar kernels stand in (never selected at run time). */
void feather_scale_prep_avx512(feather_dtype dt, const void *src, size_t len, float *a,
                               float *amax, uint64_t *nonfinite) {
    feather_scale_prep_scalar(dt, src, len, a, amax, nonfinite);
}
void feather_scale_cands_avx512(float s_abs, const float *r, unsigned n, float *s, float *inv) {
    feather_scale_cands_scalar(s_abs, r, n, s, inv);
}
void feather_scale_errors_avx512(const float *a, const float *imp, size_t len, const float *s,
                                 const float *inv, unsigned n, scale_fmt f, float *acc,
                                 float *tot) {
    feather_scale_errors_scalar(a, imp, len, s, inv, n, f, acc, tot);
}
#endif

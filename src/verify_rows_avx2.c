/* AVX2 + F16C + FMA kernels of the verifier's per-row work (verify_rows.h): the 16 lanes are two
 * 8-lane vectors; products take each half in turn, in tiles of 2 weight rows × 4 activation rows
 * (8 accumulators in registers). */
#include "verify_rows.h"

#include <immintrin.h>
#include <math.h>

/* Lanes 8h … 8h+7 of vector v of an original row, as f32. */
static inline __attribute__((always_inline)) __m256 load_w(const void *w, feather_dtype dt, size_t v, int h) {
    const uint16_t *p16 = (const uint16_t *)w + 16 * v + 8 * h;
    if (dt == FEATHER_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p16)), 16));
    if (dt == FEATHER_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p16));
    return _mm256_loadu_ps((const float *)w + 16 * v + 8 * h);
}

/* 8 fp8 codes (the low 8 bytes of c) as f32. */
static inline __attribute__((always_inline)) __m256 fp8_f32(__m128i c, int e4m3) {
    __m128i h = _mm_cvtepu8_epi16(c);
    if (e4m3) { /* S.EEEE.MMM as fp16 S.0EEEE.MMM0000000 is the value / 256, subnormals too */
        h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7f)), 7),
                         _mm_slli_epi16(_mm_and_si128(h, _mm_set1_epi16(0x80)), 8));
        return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
    }
    return _mm256_cvtph_ps(_mm_slli_epi16(h, 8)); /* e5m2 is the high byte of an fp16 */
}

static inline __attribute__((always_inline)) unsigned prep_dt(const void *w, feather_dtype dt, const uint8_t *q,
                                                              size_t qstride, feather_fp8 fmt, const float *svec,
                                                              unsigned nv, float *wf, float *df, float *sums) {
    const int e4m3 = fmt != FEATHER_FP8_E5M2;
    const __m128i bad_mask = _mm_set1_epi8(e4m3 ? 0x7f : 0x7c);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), inf = _mm256_set1_ps(INFINITY);
    unsigned bad = 0;
    for (unsigned v = 0; v < nv; v++) {
        const __m128i c = _mm_loadu_si128((const __m128i *)(q + v * qstride));
        const int bm = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(c, bad_mask), bad_mask));
        if (bm) bad += (unsigned)__builtin_popcount((unsigned)bm); /* rare: a sound file has none */
    }
    for (int h = 0; h < 2; h++) {
        float *s = sums + 8 * h;
        __m256 ww = _mm256_loadu_ps(s + VS_WW * 16), ee = _mm256_loadu_ps(s + VS_EE * 16);
        __m256 wd = _mm256_loadu_ps(s + VS_WD * 16), dd = _mm256_loadu_ps(s + VS_DD * 16);
        __m256 mx = _mm256_loadu_ps(s + VS_MAX * 16), nf = _mm256_loadu_ps(s + VS_NF * 16);
        for (unsigned v = 0; v < nv; v++) {
            __m256 x = load_w(w, dt, v, h), xw = x;
            const __m128i c = _mm_loadl_epi64((const __m128i *)(q + v * qstride + 8 * h));
            const __m256 d0 = _mm256_mul_ps(fp8_f32(c, e4m3), _mm256_set1_ps(svec[v]));
            __m256 d = d0;
            const __m256 fin = _mm256_cmp_ps(_mm256_and_ps(x, absm), inf, _CMP_LT_OQ);
            if (_mm256_movemask_ps(fin) != 0xff) { /* rare: NaN/Inf originals, as the scalar kernel */
                x = _mm256_and_ps(x, fin);
                d = _mm256_and_ps(d, fin);
                xw = _mm256_blendv_ps(d0, xw, fin);
                nf = _mm256_add_ps(nf, _mm256_andnot_ps(fin, _mm256_set1_ps(1.0f)));
            }
            const __m256 e = _mm256_sub_ps(x, d);
            ww = _mm256_fmadd_ps(x, x, ww);
            ee = _mm256_fmadd_ps(e, e, ee);
            wd = _mm256_fmadd_ps(x, d, wd);
            dd = _mm256_fmadd_ps(d, d, dd);
            mx = _mm256_max_ps(_mm256_and_ps(e, absm), mx);
            _mm256_storeu_ps(wf + 16 * v + 8 * h, xw);
            if (df) _mm256_storeu_ps(df + 16 * v + 8 * h, d0);
        }
        _mm256_storeu_ps(s + VS_WW * 16, ww);
        _mm256_storeu_ps(s + VS_EE * 16, ee);
        _mm256_storeu_ps(s + VS_WD * 16, wd);
        _mm256_storeu_ps(s + VS_DD * 16, dd);
        _mm256_storeu_ps(s + VS_MAX * 16, mx);
        _mm256_storeu_ps(s + VS_NF * 16, nf);
    }
    return bad;
}

static unsigned prep(const void *w, feather_dtype dt, const uint8_t *q, size_t qstride, feather_fp8 fmt,
                     const float *svec, unsigned nv, float *wf, float *df, float *sums) {
    switch (dt) {
    case FEATHER_BF16: return prep_dt(w, FEATHER_BF16, q, qstride, fmt, svec, nv, wf, df, sums);
    case FEATHER_F16: return prep_dt(w, FEATHER_F16, q, qstride, fmt, svec, nv, wf, df, sums);
    default: return prep_dt(w, FEATHER_F32, q, qstride, fmt, svec, nv, wf, df, sums);
    }
}

#define ACC(r, t) (acc + ((r) * ldacc + (t)) * 16 + h)

static void mul(const float *a, size_t lda, unsigned m, const float *w, size_t ldw, unsigned rows, unsigned len,
                float *acc, size_t ldacc) {
    for (unsigned h = 0; h < 16; h += 8) {
        unsigned r = 0;
        for (; r + 2 <= rows; r += 2) {
            const float *w0 = w + r * ldw + h, *w1 = w0 + ldw;
            unsigned t = 0;
            for (; t + 4 <= m; t += 4) {
                const float *a0 = a + t * lda + h, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
                __m256 c00 = _mm256_loadu_ps(ACC(r, t)), c01 = _mm256_loadu_ps(ACC(r, t + 1)),
                       c02 = _mm256_loadu_ps(ACC(r, t + 2)), c03 = _mm256_loadu_ps(ACC(r, t + 3));
                __m256 c10 = _mm256_loadu_ps(ACC(r + 1, t)), c11 = _mm256_loadu_ps(ACC(r + 1, t + 1)),
                       c12 = _mm256_loadu_ps(ACC(r + 1, t + 2)), c13 = _mm256_loadu_ps(ACC(r + 1, t + 3));
                for (unsigned v = 0; v < len; v += 16) {
                    const __m256 x0 = _mm256_loadu_ps(w0 + v), x1 = _mm256_loadu_ps(w1 + v);
                    __m256 y = _mm256_loadu_ps(a0 + v);
                    c00 = _mm256_fmadd_ps(y, x0, c00); c10 = _mm256_fmadd_ps(y, x1, c10);
                    y = _mm256_loadu_ps(a1 + v);
                    c01 = _mm256_fmadd_ps(y, x0, c01); c11 = _mm256_fmadd_ps(y, x1, c11);
                    y = _mm256_loadu_ps(a2 + v);
                    c02 = _mm256_fmadd_ps(y, x0, c02); c12 = _mm256_fmadd_ps(y, x1, c12);
                    y = _mm256_loadu_ps(a3 + v);
                    c03 = _mm256_fmadd_ps(y, x0, c03); c13 = _mm256_fmadd_ps(y, x1, c13);
                }
                _mm256_storeu_ps(ACC(r, t), c00); _mm256_storeu_ps(ACC(r, t + 1), c01);
                _mm256_storeu_ps(ACC(r, t + 2), c02); _mm256_storeu_ps(ACC(r, t + 3), c03);
                _mm256_storeu_ps(ACC(r + 1, t), c10); _mm256_storeu_ps(ACC(r + 1, t + 1), c11);
                _mm256_storeu_ps(ACC(r + 1, t + 2), c12); _mm256_storeu_ps(ACC(r + 1, t + 3), c13);
            }
            for (; t < m; t++) {
                const float *a0 = a + t * lda + h;
                __m256 c0 = _mm256_loadu_ps(ACC(r, t)), c1 = _mm256_loadu_ps(ACC(r + 1, t));
                for (unsigned v = 0; v < len; v += 16) {
                    const __m256 y = _mm256_loadu_ps(a0 + v);
                    c0 = _mm256_fmadd_ps(y, _mm256_loadu_ps(w0 + v), c0);
                    c1 = _mm256_fmadd_ps(y, _mm256_loadu_ps(w1 + v), c1);
                }
                _mm256_storeu_ps(ACC(r, t), c0);
                _mm256_storeu_ps(ACC(r + 1, t), c1);
            }
        }
        for (; r < rows; r++)
            for (unsigned t = 0; t < m; t++) {
                const float *a0 = a + t * lda + h, *w0 = w + r * ldw + h;
                __m256 c = _mm256_loadu_ps(ACC(r, t));
                for (unsigned v = 0; v < len; v += 16)
                    c = _mm256_fmadd_ps(_mm256_loadu_ps(a0 + v), _mm256_loadu_ps(w0 + v), c);
                _mm256_storeu_ps(ACC(r, t), c);
            }
    }
}

static uint64_t bad_codes(const uint8_t *q, uint64_t n, feather_fp8 fmt) {
    const __m256i mask = _mm256_set1_epi8((char)(fmt == FEATHER_FP8_E5M2 ? 0x7c : 0x7f));
    uint64_t c = 0, i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(q + i));
        const unsigned bm = (unsigned)_mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(x, mask), mask));
        if (bm) c += (uint64_t)__builtin_popcount(bm);
    }
    const uint8_t m8 = fmt == FEATHER_FP8_E5M2 ? 0x7c : 0x7f;
    for (; i < n; i++) c += (q[i] & m8) == m8;
    return c;
}

void feather_vrows_kernels_avx2(vrows_kernels *k) {
    k->prep = prep;
    k->mul = mul;
    k->bad_codes = bad_codes;
}

/* AVX-512 kernels of the verifier's per-row work (verify_rows.h): the 16 lanes are one vector;
 * products in tiles of 4 weight rows × 4 activation rows (16 accumulators in registers). */
#include "verify_rows.h"

#include <immintrin.h>
#include <math.h>

static inline __attribute__((always_inline)) __m512 load_w(const void *w, feather_dtype dt, size_t v) {
    if (dt == FEATHER_BF16) /* bf16 → f32: the 16 bits become the high half */
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + 16 * v))), 16));
    if (dt == FEATHER_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)w + 16 * v)));
    return _mm512_loadu_ps((const float *)w + 16 * v);
}

static inline __attribute__((always_inline)) unsigned prep_dt(const void *w, feather_dtype dt, const uint8_t *q,
                                                              size_t qstride, feather_fp8 fmt, const float *svec,
                                                              unsigned nv, float *wf, float *df, float *sums) {
    const int e4m3 = fmt != FEATHER_FP8_E5M2;
    const __m128i bad_mask = _mm_set1_epi8(e4m3 ? 0x7f : 0x7c);
    const __m256i m7f = _mm256_set1_epi16(0x7f), m80 = _mm256_set1_epi16(0x80);
    const __m512 k256 = _mm512_set1_ps(256.0f);
    const __m512i absm = _mm512_set1_epi32(0x7fffffff);
    __m512 ww = _mm512_loadu_ps(sums + VS_WW * 16), ee = _mm512_loadu_ps(sums + VS_EE * 16);
    __m512 wd = _mm512_loadu_ps(sums + VS_WD * 16), dd = _mm512_loadu_ps(sums + VS_DD * 16);
    __m512 mx = _mm512_loadu_ps(sums + VS_MAX * 16), nf = _mm512_loadu_ps(sums + VS_NF * 16);
    const __m512 inf = _mm512_set1_ps(INFINITY);
    unsigned bad = 0;
    for (unsigned v = 0; v < nv; v++) {
        __m512 x = load_w(w, dt, v), xw = x;
        const __m128i c = _mm_loadu_si128((const __m128i *)(q + v * qstride));
        const __mmask16 bm = _mm_cmpeq_epi8_mask(_mm_and_si128(c, bad_mask), bad_mask);
        if (bm) bad += (unsigned)__builtin_popcount(bm); /* rare: a sound file has none */
        __m256i h = _mm256_cvtepu8_epi16(c);
        __m512 f;
        if (e4m3) { /* S.EEEE.MMM as fp16 S.0EEEE.MMM0000000 is the value / 256, subnormals too */
            h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(h, m7f), 7),
                                _mm256_slli_epi16(_mm256_and_si256(h, m80), 8));
            f = _mm512_mul_ps(_mm512_cvtph_ps(h), k256);
        } else { /* e5m2 is the high byte of an fp16 */
            f = _mm512_cvtph_ps(_mm256_slli_epi16(h, 8));
        }
        const __m512 d0 = _mm512_mul_ps(f, _mm512_set1_ps(svec[v]));
        __m512 d = d0;
        const __mmask16 fin = _mm512_cmp_ps_mask(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), absm)), inf,
                                                 _CMP_LT_OQ);
        if (fin != 0xffff) { /* rare: NaN/Inf originals, as the scalar kernel */
            x = _mm512_maskz_mov_ps(fin, x);
            d = _mm512_maskz_mov_ps(fin, d);
            xw = _mm512_mask_mov_ps(d0, fin, xw);
            nf = _mm512_mask_add_ps(nf, (__mmask16)~fin, nf, _mm512_set1_ps(1.0f));
        }
        const __m512 e = _mm512_sub_ps(x, d);
        ww = _mm512_fmadd_ps(x, x, ww);
        ee = _mm512_fmadd_ps(e, e, ee);
        wd = _mm512_fmadd_ps(x, d, wd);
        dd = _mm512_fmadd_ps(d, d, dd);
        mx = _mm512_max_ps(_mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(e), absm)), mx);
        _mm512_storeu_ps(wf + 16 * v, xw);
        if (df) _mm512_storeu_ps(df + 16 * v, d0);
    }
    _mm512_storeu_ps(sums + VS_WW * 16, ww);
    _mm512_storeu_ps(sums + VS_EE * 16, ee);
    _mm512_storeu_ps(sums + VS_WD * 16, wd);
    _mm512_storeu_ps(sums + VS_DD * 16, dd);
    _mm512_storeu_ps(sums + VS_MAX * 16, mx);
    _mm512_storeu_ps(sums + VS_NF * 16, nf);
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

#define ACC(r, t) (acc + ((r) * ldacc + (t)) * 16)

static void mul(const float *a, size_t lda, unsigned m, const float *w, size_t ldw, unsigned rows, unsigned len,
                float *acc, size_t ldacc) {
    unsigned r = 0;
    for (; r + 4 <= rows; r += 4) {
        const float *w0 = w + r * ldw, *w1 = w0 + ldw, *w2 = w1 + ldw, *w3 = w2 + ldw;
        unsigned t = 0;
        for (; t + 4 <= m; t += 4) {
            const float *a0 = a + t * lda, *a1 = a0 + lda, *a2 = a1 + lda, *a3 = a2 + lda;
            __m512 c00 = _mm512_loadu_ps(ACC(r, t)), c01 = _mm512_loadu_ps(ACC(r, t + 1)),
                   c02 = _mm512_loadu_ps(ACC(r, t + 2)), c03 = _mm512_loadu_ps(ACC(r, t + 3));
            __m512 c10 = _mm512_loadu_ps(ACC(r + 1, t)), c11 = _mm512_loadu_ps(ACC(r + 1, t + 1)),
                   c12 = _mm512_loadu_ps(ACC(r + 1, t + 2)), c13 = _mm512_loadu_ps(ACC(r + 1, t + 3));
            __m512 c20 = _mm512_loadu_ps(ACC(r + 2, t)), c21 = _mm512_loadu_ps(ACC(r + 2, t + 1)),
                   c22 = _mm512_loadu_ps(ACC(r + 2, t + 2)), c23 = _mm512_loadu_ps(ACC(r + 2, t + 3));
            __m512 c30 = _mm512_loadu_ps(ACC(r + 3, t)), c31 = _mm512_loadu_ps(ACC(r + 3, t + 1)),
                   c32 = _mm512_loadu_ps(ACC(r + 3, t + 2)), c33 = _mm512_loadu_ps(ACC(r + 3, t + 3));
            for (unsigned v = 0; v < len; v += 16) {
                const __m512 x0 = _mm512_loadu_ps(w0 + v), x1 = _mm512_loadu_ps(w1 + v),
                             x2 = _mm512_loadu_ps(w2 + v), x3 = _mm512_loadu_ps(w3 + v);
                __m512 y = _mm512_loadu_ps(a0 + v);
                c00 = _mm512_fmadd_ps(y, x0, c00); c10 = _mm512_fmadd_ps(y, x1, c10);
                c20 = _mm512_fmadd_ps(y, x2, c20); c30 = _mm512_fmadd_ps(y, x3, c30);
                y = _mm512_loadu_ps(a1 + v);
                c01 = _mm512_fmadd_ps(y, x0, c01); c11 = _mm512_fmadd_ps(y, x1, c11);
                c21 = _mm512_fmadd_ps(y, x2, c21); c31 = _mm512_fmadd_ps(y, x3, c31);
                y = _mm512_loadu_ps(a2 + v);
                c02 = _mm512_fmadd_ps(y, x0, c02); c12 = _mm512_fmadd_ps(y, x1, c12);
                c22 = _mm512_fmadd_ps(y, x2, c22); c32 = _mm512_fmadd_ps(y, x3, c32);
                y = _mm512_loadu_ps(a3 + v);
                c03 = _mm512_fmadd_ps(y, x0, c03); c13 = _mm512_fmadd_ps(y, x1, c13);
                c23 = _mm512_fmadd_ps(y, x2, c23); c33 = _mm512_fmadd_ps(y, x3, c33);
            }
            _mm512_storeu_ps(ACC(r, t), c00); _mm512_storeu_ps(ACC(r, t + 1), c01);
            _mm512_storeu_ps(ACC(r, t + 2), c02); _mm512_storeu_ps(ACC(r, t + 3), c03);
            _mm512_storeu_ps(ACC(r + 1, t), c10); _mm512_storeu_ps(ACC(r + 1, t + 1), c11);
            _mm512_storeu_ps(ACC(r + 1, t + 2), c12); _mm512_storeu_ps(ACC(r + 1, t + 3), c13);
            _mm512_storeu_ps(ACC(r + 2, t), c20); _mm512_storeu_ps(ACC(r + 2, t + 1), c21);
            _mm512_storeu_ps(ACC(r + 2, t + 2), c22); _mm512_storeu_ps(ACC(r + 2, t + 3), c23);
            _mm512_storeu_ps(ACC(r + 3, t), c30); _mm512_storeu_ps(ACC(r + 3, t + 1), c31);
            _mm512_storeu_ps(ACC(r + 3, t + 2), c32); _mm512_storeu_ps(ACC(r + 3, t + 3), c33);
        }
        for (; t < m; t++) { /* the last activation rows, one at a time */
            const float *a0 = a + t * lda;
            __m512 c0 = _mm512_loadu_ps(ACC(r, t)), c1 = _mm512_loadu_ps(ACC(r + 1, t)),
                   c2 = _mm512_loadu_ps(ACC(r + 2, t)), c3 = _mm512_loadu_ps(ACC(r + 3, t));
            for (unsigned v = 0; v < len; v += 16) {
                const __m512 y = _mm512_loadu_ps(a0 + v);
                c0 = _mm512_fmadd_ps(y, _mm512_loadu_ps(w0 + v), c0);
                c1 = _mm512_fmadd_ps(y, _mm512_loadu_ps(w1 + v), c1);
                c2 = _mm512_fmadd_ps(y, _mm512_loadu_ps(w2 + v), c2);
                c3 = _mm512_fmadd_ps(y, _mm512_loadu_ps(w3 + v), c3);
            }
            _mm512_storeu_ps(ACC(r, t), c0); _mm512_storeu_ps(ACC(r + 1, t), c1);
            _mm512_storeu_ps(ACC(r + 2, t), c2); _mm512_storeu_ps(ACC(r + 3, t), c3);
        }
    }
    for (; r < rows; r++) /* the last weight rows, one at a time */
        for (unsigned t = 0; t < m; t++) {
            const float *a0 = a + t * lda, *w0 = w + r * ldw;
            __m512 c = _mm512_loadu_ps(ACC(r, t));
            for (unsigned v = 0; v < len; v += 16) c = _mm512_fmadd_ps(_mm512_loadu_ps(a0 + v), _mm512_loadu_ps(w0 + v), c);
            _mm512_storeu_ps(ACC(r, t), c);
        }
}

static uint64_t bad_codes(const uint8_t *q, uint64_t n, feather_fp8 fmt) {
    const __m512i mask = _mm512_set1_epi8(fmt == FEATHER_FP8_E5M2 ? 0x7c : 0x7f);
    uint64_t c = 0, i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m512i x = _mm512_loadu_si512((const void *)(q + i));
        const __mmask64 bm = _mm512_cmpeq_epi8_mask(_mm512_and_si512(x, mask), mask);
        if (bm) c += (uint64_t)__builtin_popcountll(bm);
    }
    const uint8_t m8 = fmt == FEATHER_FP8_E5M2 ? 0x7c : 0x7f;
    for (; i < n; i++) c += (q[i] & m8) == m8;
    return c;
}

void feather_vrows_kernels_avx512(vrows_kernels *k) {
    k->prep = prep;
    k->mul = mul;
    k->bad_codes = bad_codes;
}

/* AVX-512 kernels of the CPU matrix product (see gemm_cpu.h): 16 columns per vector, 4 rows ×
 * 64 columns of accumulators in registers. */
#include "gemm_cpu.h"
#include "gemm_cpu_transpose.h"

#include <immintrin.h>
#include <string.h>

static void a_convert(const uint16_t *a, uint64_t lda, unsigned rows, unsigned len, float *af) {
    for (unsigned r = 0; r < rows; r++)
        for (unsigned k = 0; k < len; k += 16)
            _mm512_storeu_ps(af + (size_t)r * len + k,
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + r * lda + k))));
}

static void b_decode(const uint8_t *q, uint64_t n, uint64_t n0, unsigned ncols, uint64_t kb0,
                     unsigned nkb, float *bp) {
    for (unsigned kb = 0; kb < nkb; kb++) {
        for (unsigned c0 = 0; c0 < GEMM_CPU_NB; c0 += 16) {
            unsigned valid = ncols > c0 ? (ncols - c0 < 16 ? ncols - c0 : 16) : 0;
            float *dst = bp + (size_t)kb * 16 * GEMM_CPU_NB + c0;
            if (!valid) {
                for (unsigned i = 0; i < 16; i++) _mm512_storeu_ps(dst + i * GEMM_CPU_NB, _mm512_setzero_ps());
                continue;
            }
            __m128i in[16], t[16];
            gemm_load_records(q + ((kb0 + kb) * n + n0 + c0) * 16, valid, in);
            gemm_transpose16x16(in, t);
            for (unsigned i = 0; i < 16; i++) {
                /* e5m2 byte → high byte of an fp16 → f32, exact */
                __m256i h = _mm256_slli_epi16(_mm256_cvtepu8_epi16(t[i]), 8);
                _mm512_storeu_ps(dst + i * GEMM_CPU_NB, _mm512_cvtph_ps(h));
            }
        }
    }
}

static void panel_mul(const float *af, unsigned rows, unsigned len, const float *bp, float *acc) {
    unsigned r = 0;
    for (; r + 4 <= rows; r += 4) {
        float *o0 = acc + (size_t)r * GEMM_CPU_NB, *o1 = o0 + GEMM_CPU_NB, *o2 = o1 + GEMM_CPU_NB,
              *o3 = o2 + GEMM_CPU_NB;
        const float *a0 = af + (size_t)r * len, *a1 = a0 + len, *a2 = a1 + len, *a3 = a2 + len;
        __m512 c00 = _mm512_loadu_ps(o0), c01 = _mm512_loadu_ps(o0 + 16), c02 = _mm512_loadu_ps(o0 + 32), c03 = _mm512_loadu_ps(o0 + 48);
        __m512 c10 = _mm512_loadu_ps(o1), c11 = _mm512_loadu_ps(o1 + 16), c12 = _mm512_loadu_ps(o1 + 32), c13 = _mm512_loadu_ps(o1 + 48);
        __m512 c20 = _mm512_loadu_ps(o2), c21 = _mm512_loadu_ps(o2 + 16), c22 = _mm512_loadu_ps(o2 + 32), c23 = _mm512_loadu_ps(o2 + 48);
        __m512 c30 = _mm512_loadu_ps(o3), c31 = _mm512_loadu_ps(o3 + 16), c32 = _mm512_loadu_ps(o3 + 32), c33 = _mm512_loadu_ps(o3 + 48);
        for (unsigned k = 0; k < len; k++) {
            const float *b = bp + (size_t)k * GEMM_CPU_NB;
            __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32), b3 = _mm512_loadu_ps(b + 48);
            __m512 x = _mm512_set1_ps(a0[k]);
            c00 = _mm512_fmadd_ps(x, b0, c00); c01 = _mm512_fmadd_ps(x, b1, c01);
            c02 = _mm512_fmadd_ps(x, b2, c02); c03 = _mm512_fmadd_ps(x, b3, c03);
            x = _mm512_set1_ps(a1[k]);
            c10 = _mm512_fmadd_ps(x, b0, c10); c11 = _mm512_fmadd_ps(x, b1, c11);
            c12 = _mm512_fmadd_ps(x, b2, c12); c13 = _mm512_fmadd_ps(x, b3, c13);
            x = _mm512_set1_ps(a2[k]);
            c20 = _mm512_fmadd_ps(x, b0, c20); c21 = _mm512_fmadd_ps(x, b1, c21);
            c22 = _mm512_fmadd_ps(x, b2, c22); c23 = _mm512_fmadd_ps(x, b3, c23);
            x = _mm512_set1_ps(a3[k]);
            c30 = _mm512_fmadd_ps(x, b0, c30); c31 = _mm512_fmadd_ps(x, b1, c31);
            c32 = _mm512_fmadd_ps(x, b2, c32); c33 = _mm512_fmadd_ps(x, b3, c33);
        }
        _mm512_storeu_ps(o0, c00); _mm512_storeu_ps(o0 + 16, c01); _mm512_storeu_ps(o0 + 32, c02); _mm512_storeu_ps(o0 + 48, c03);
        _mm512_storeu_ps(o1, c10); _mm512_storeu_ps(o1 + 16, c11); _mm512_storeu_ps(o1 + 32, c12); _mm512_storeu_ps(o1 + 48, c13);
        _mm512_storeu_ps(o2, c20); _mm512_storeu_ps(o2 + 16, c21); _mm512_storeu_ps(o2 + 32, c22); _mm512_storeu_ps(o2 + 48, c23);
        _mm512_storeu_ps(o3, c30); _mm512_storeu_ps(o3 + 16, c31); _mm512_storeu_ps(o3 + 32, c32); _mm512_storeu_ps(o3 + 48, c33);
    }
    for (; r < rows; r++) {
        float *o = acc + (size_t)r * GEMM_CPU_NB;
        const float *ar = af + (size_t)r * len;
        __m512 c0 = _mm512_loadu_ps(o), c1 = _mm512_loadu_ps(o + 16), c2 = _mm512_loadu_ps(o + 32), c3 = _mm512_loadu_ps(o + 48);
        for (unsigned k = 0; k < len; k++) {
            const float *b = bp + (size_t)k * GEMM_CPU_NB;
            __m512 x = _mm512_set1_ps(ar[k]);
            c0 = _mm512_fmadd_ps(x, _mm512_loadu_ps(b), c0);
            c1 = _mm512_fmadd_ps(x, _mm512_loadu_ps(b + 16), c1);
            c2 = _mm512_fmadd_ps(x, _mm512_loadu_ps(b + 32), c2);
            c3 = _mm512_fmadd_ps(x, _mm512_loadu_ps(b + 48), c3);
        }
        _mm512_storeu_ps(o, c0); _mm512_storeu_ps(o + 16, c1); _mm512_storeu_ps(o + 32, c2); _mm512_storeu_ps(o + 48, c3);
    }
}

static void flush(float *accg, unsigned rows, const float *s, float *acc) {
    const __m512 z = _mm512_setzero_ps();
    for (unsigned r = 0; r < rows; r++)
        for (unsigned c = 0; c < GEMM_CPU_NB; c += 16) {
            size_t i = (size_t)r * GEMM_CPU_NB + c;
            _mm512_storeu_ps(acc + i, _mm512_fmadd_ps(_mm512_loadu_ps(accg + i), _mm512_loadu_ps(s + c), _mm512_loadu_ps(acc + i)));
            _mm512_storeu_ps(accg + i, z);
        }
}

void feather_gemm_cpu_kernels_avx512(gemm_cpu_kernels *k) {
    k->a_convert = a_convert;
    k->b_decode = b_decode;
    k->panel_mul = panel_mul;
    k->flush = flush;
}

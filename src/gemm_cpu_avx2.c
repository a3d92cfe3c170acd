/* AVX2 + F16C + FMA kernels of the CPU matrix product (see gemm_cpu.h): 8 columns per vector,
 * 2 rows × 32 columns of accumulators in registers. */
#include "gemm_cpu.h"
#include "gemm_cpu_transpose.h"

#include <immintrin.h>

static void a_convert(const uint16_t *a, uint64_t lda, unsigned rows, unsigned len, float *af) {
    for (unsigned r = 0; r < rows; r++)
        for (unsigned k = 0; k < len; k += 8)
            _mm256_storeu_ps(af + (size_t)r * len + k,
                             _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + r * lda + k))));
}

static void b_decode(const uint8_t *q, uint64_t n, uint64_t n0, unsigned ncols, uint64_t kb0,
                     unsigned nkb, float *bp) {
    for (unsigned kb = 0; kb < nkb; kb++) {
        for (unsigned c0 = 0; c0 < GEMM_CPU_NB; c0 += 16) {
            unsigned valid = ncols > c0 ? (ncols - c0 < 16 ? ncols - c0 : 16) : 0;
            float *dst = bp + (size_t)kb * 16 * GEMM_CPU_NB + c0;
            if (!valid) {
                for (unsigned i = 0; i < 16; i++) {
                    _mm256_storeu_ps(dst + i * GEMM_CPU_NB, _mm256_setzero_ps());
                    _mm256_storeu_ps(dst + i * GEMM_CPU_NB + 8, _mm256_setzero_ps());
                }
                continue;
            }
            __m128i in[16], t[16];
            gemm_load_records(q + ((kb0 + kb) * n + n0 + c0) * 16, valid, in);
            gemm_transpose16x16(in, t);
            for (unsigned i = 0; i < 16; i++) {
                /* e5m2 byte → high byte of an fp16 → f32, exact */
                __m128i lo = _mm_slli_epi16(_mm_cvtepu8_epi16(t[i]), 8);
                __m128i hi = _mm_slli_epi16(_mm_cvtepu8_epi16(_mm_srli_si128(t[i], 8)), 8);
                _mm256_storeu_ps(dst + i * GEMM_CPU_NB, _mm256_cvtph_ps(lo));
                _mm256_storeu_ps(dst + i * GEMM_CPU_NB + 8, _mm256_cvtph_ps(hi));
            }
        }
    }
}

static void panel_mul(const float *af, unsigned rows, unsigned len, const float *bp, float *acc) {
    for (unsigned c = 0; c < GEMM_CPU_NB; c += 32) {
        unsigned r = 0;
        for (; r + 2 <= rows; r += 2) {
            float *o0 = acc + (size_t)r * GEMM_CPU_NB + c, *o1 = o0 + GEMM_CPU_NB;
            const float *a0 = af + (size_t)r * len, *a1 = a0 + len;
            __m256 c00 = _mm256_loadu_ps(o0), c01 = _mm256_loadu_ps(o0 + 8), c02 = _mm256_loadu_ps(o0 + 16), c03 = _mm256_loadu_ps(o0 + 24);
            __m256 c10 = _mm256_loadu_ps(o1), c11 = _mm256_loadu_ps(o1 + 8), c12 = _mm256_loadu_ps(o1 + 16), c13 = _mm256_loadu_ps(o1 + 24);
            for (unsigned k = 0; k < len; k++) {
                const float *b = bp + (size_t)k * GEMM_CPU_NB + c;
                __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), b2 = _mm256_loadu_ps(b + 16), b3 = _mm256_loadu_ps(b + 24);
                __m256 x = _mm256_broadcast_ss(a0 + k);
                c00 = _mm256_fmadd_ps(x, b0, c00); c01 = _mm256_fmadd_ps(x, b1, c01);
                c02 = _mm256_fmadd_ps(x, b2, c02); c03 = _mm256_fmadd_ps(x, b3, c03);
                x = _mm256_broadcast_ss(a1 + k);
                c10 = _mm256_fmadd_ps(x, b0, c10); c11 = _mm256_fmadd_ps(x, b1, c11);
                c12 = _mm256_fmadd_ps(x, b2, c12); c13 = _mm256_fmadd_ps(x, b3, c13);
            }
            _mm256_storeu_ps(o0, c00); _mm256_storeu_ps(o0 + 8, c01); _mm256_storeu_ps(o0 + 16, c02); _mm256_storeu_ps(o0 + 24, c03);
            _mm256_storeu_ps(o1, c10); _mm256_storeu_ps(o1 + 8, c11); _mm256_storeu_ps(o1 + 16, c12); _mm256_storeu_ps(o1 + 24, c13);
        }
        for (; r < rows; r++) {
            float *o = acc + (size_t)r * GEMM_CPU_NB + c;
            const float *ar = af + (size_t)r * len;
            __m256 c0 = _mm256_loadu_ps(o), c1 = _mm256_loadu_ps(o + 8), c2 = _mm256_loadu_ps(o + 16), c3 = _mm256_loadu_ps(o + 24);
            for (unsigned k = 0; k < len; k++) {
                const float *b = bp + (size_t)k * GEMM_CPU_NB + c;
                __m256 x = _mm256_broadcast_ss(ar + k);
                c0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b), c0);
                c1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b + 8), c1);
                c2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b + 16), c2);
                c3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(b + 24), c3);
            }
            _mm256_storeu_ps(o, c0); _mm256_storeu_ps(o + 8, c1); _mm256_storeu_ps(o + 16, c2); _mm256_storeu_ps(o + 24, c3);
        }
    }
}

static void flush(float *accg, unsigned rows, const float *s, float *acc) {
    const __m256 z = _mm256_setzero_ps();
    for (unsigned r = 0; r < rows; r++)
        for (unsigned c = 0; c < GEMM_CPU_NB; c += 8) {
            size_t i = (size_t)r * GEMM_CPU_NB + c;
            _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(_mm256_loadu_ps(accg + i), _mm256_loadu_ps(s + c), _mm256_loadu_ps(acc + i)));
            _mm256_storeu_ps(accg + i, z);
        }
}

void feather_gemm_cpu_kernels_avx2(gemm_cpu_kernels *k) {
    k->a_convert = a_convert;
    k->b_decode = b_decode;
    k->panel_mul = panel_mul;
    k->flush = flush;
}

/* AVX2 kernels of the layout conversion (see pack.c): move 4 rows × n bytes (n % 64 == 0)
 * between plain rows and packed 64-byte lines (the 4 rows' 16-byte pieces of one slab).
 * Only called after run-time detection. nt: streaming stores (destination lines 64-byte
 * aligned, no fence: the caller fences once). */
#include "pack_kernels.h"

#include <immintrin.h>

static inline __m128i ld(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)p); }
static inline __m256i pair(__m128i a, __m128i b) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
}
static inline void st(uint8_t *p, __m256i v, int nt) {
    if (nt) _mm256_stream_si256((__m256i *)p, v);
    else _mm256_storeu_si256((__m256i *)p, v);
}

void feather_pack4_avx2(const uint8_t *src, size_t k, size_t n, uint8_t *dst, size_t step, int nt) {
    const uint8_t *r0 = src, *r1 = r0 + k, *r2 = r1 + k, *r3 = r2 + k;
    for (size_t c = 0; c < n; c += 16) {
        uint8_t *o = dst + (c / 16) * step;
        st(o, pair(ld(r0 + c), ld(r1 + c)), nt);
        st(o + 32, pair(ld(r2 + c), ld(r3 + c)), nt);
    }
}

void feather_unpack4_avx2(const uint8_t *src, size_t step, size_t n, uint8_t *dst, size_t k, int nt) {
    for (size_t c = 0; c < n; c += 64) {
        const uint8_t *l = src + (c / 16) * step; /* lines of pieces c/16 … c/16 + 3 */
        for (int i = 0; i < 4; i++) {
            uint8_t *o = dst + (size_t)i * k + c;
            st(o, pair(ld(l + 16 * i), ld(l + step + 16 * i)), nt);
            st(o + 32, pair(ld(l + 2 * step + 16 * i), ld(l + 3 * step + 16 * i)), nt);
        }
    }
}

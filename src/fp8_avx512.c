/* AVX-512 (F/BW/VL) kernels of the fp8 codec; see quant_kernels.h for their contracts.
 *
 * Only reached through feather_cast_kernel / feather_stats_kernel after run-time detection.
 * Every kernel gives the same bytes (and, for statistics, the same doubles) as the scalar
 * reference in fp8.c; tests/test_fp8.c checks that exhaustively for 16-bit inputs. */
#include "quant_kernels.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* ---- f32 → fp8, 16 lanes ----
 * Normal range: round the f32 pattern to the fp8 mantissa width with an integer add (half an
 * ulp minus one, plus the kept lowest bit for ties to even), shift, rebias, clamp to the max
 * code (which also catches ±Inf). Subnormal range: add a float whose ulp is the fp8 subnormal
 * step (2^7 for e5m2, 2^14 for e4m3fn), so the FPU's own RNE lands on the grid; the low bits
 * of the sum count the steps. Then the sign, and NaN → +0. */
AI __m512i codes_from_f32(__m512i u, int e4m3) {
    const int shift = e4m3 ? 20 : 21;
    const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff));
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(a, shift), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(a, _mm512_set1_epi32((1 << (shift - 1)) - 1)), odd);
    __m512i cn = _mm512_sub_epi32(_mm512_srli_epi32(r, shift),
                                  _mm512_set1_epi32(e4m3 ? (120 << 3) : (112 << 2)));
    cn = _mm512_min_epu32(cn, _mm512_set1_epi32(e4m3 ? 0x7e : 0x7b));
    const __m512 magic = _mm512_set1_ps(e4m3 ? 16384.0f : 128.0f);
    __m512i cs = _mm512_sub_epi32(_mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), magic)),
                                  _mm512_castps_si512(magic));
    __mmask16 sub = _mm512_cmplt_epu32_mask(a, _mm512_set1_epi32(e4m3 ? 0x3c800000 : 0x38800000));
    __m512i c = _mm512_mask_blend_epi32(sub, cn, cs);
    __mmask16 ok = _mm512_cmple_epu32_mask(a, _mm512_set1_epi32(0x7f800000)); /* not NaN */
    /* c | ((u >> 24) & 0x80), zeroed for NaN */
    return _mm512_maskz_ternarylogic_epi32(ok, c, _mm512_srli_epi32(u, 24), _mm512_set1_epi32(0x80), 0xf8);
}

/* 16 source elements as f32 bit patterns; masked lanes read as +0. */
AI __m512i load16(const void *src, size_t i, int dt, int masked, __mmask16 m) {
    if (dt == FEATHER_F32) {
        const float *p = (const float *)src + i;
        return masked ? _mm512_maskz_loadu_epi32(m, p) : _mm512_loadu_si512(p);
    }
    const uint16_t *p = (const uint16_t *)src + i;
    __m256i h = masked ? _mm256_maskz_loadu_epi16(m, p) : _mm256_loadu_si256((const __m256i *)p);
    if (dt == FEATHER_F16) return _mm512_castps_si512(_mm512_cvtph_ps(h));
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
}

AI __m128i cast16(const void *src, size_t i, int dt, int e4m3, int unit, __m512 vinv,
                  __m512i *acc, int masked, __mmask16 m) {
    __m512i u = load16(src, i, dt, masked, m);
    *acc = _mm512_max_epu32(*acc, _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)));
    if (!unit) u = _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(u), vinv));
    return _mm512_cvtepi32_epi8(codes_from_f32(u, e4m3));
}

/* Four vectors of 16 codes (one per 32-bit lane, ≤ 0xff) → their 64 bytes, c0's first.
 * The two packs interleave per 128-bit lane (dword 4l + k holds c_k's lane l); one dword
 * permutation puts them in order. */
AI __m512i bytes_of4(__m512i c0, __m512i c1, __m512i c2, __m512i c3) {
    __m512i x = _mm512_packus_epi16(_mm512_packus_epi32(c0, c1), _mm512_packus_epi32(c2, c3));
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), x);
}

AI __m512i codes16(const void *row, size_t i, int dt, int e4m3, int unit, __m512 vinv,
                   __m512i *acc) {
    __m512i u = load16(row, i, dt, 0, 0);
    *acc = _mm512_max_epu32(*acc, _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)));
    if (!unit) u = _mm512_castps_si512(_mm512_mul_ps(_mm512_castsi512_ps(u), vinv));
    return codes_from_f32(u, e4m3);
}

AI int run_f32(const void *src, size_t n, float inv, uint8_t *dst, size_t stride, int dt,
               int e4m3, int unit) {
    const __m512 vinv = _mm512_set1_ps(inv);
    __m512i acc = _mm512_setzero_si512();
    size_t i = 0;
    uint8_t *o = dst;
    if (stride == 16) /* contiguous: four pieces packed together, one 64-byte store */
        for (; i + 64 <= n; i += 64, o += 64)
            _mm512_storeu_si512(o, bytes_of4(codes16(src, i, dt, e4m3, unit, vinv, &acc),
                                             codes16(src, i + 16, dt, e4m3, unit, vinv, &acc),
                                             codes16(src, i + 32, dt, e4m3, unit, vinv, &acc),
                                             codes16(src, i + 48, dt, e4m3, unit, vinv, &acc)));
    for (; i + 64 <= n; i += 64, o += 4 * stride) {
        __m128i c0 = cast16(src, i, dt, e4m3, unit, vinv, &acc, 0, 0);
        __m128i c1 = cast16(src, i + 16, dt, e4m3, unit, vinv, &acc, 0, 0);
        __m128i c2 = cast16(src, i + 32, dt, e4m3, unit, vinv, &acc, 0, 0);
        __m128i c3 = cast16(src, i + 48, dt, e4m3, unit, vinv, &acc, 0, 0);
        _mm_storeu_si128((__m128i *)o, c0);
        _mm_storeu_si128((__m128i *)(o + stride), c1);
        _mm_storeu_si128((__m128i *)(o + 2 * stride), c2);
        _mm_storeu_si128((__m128i *)(o + 3 * stride), c3);
    }
    for (; i + 16 <= n; i += 16, o += stride)
        _mm_storeu_si128((__m128i *)o, cast16(src, i, dt, e4m3, unit, vinv, &acc, 0, 0));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm_mask_storeu_epi8(o, m, cast16(src, i, dt, e4m3, unit, vinv, &acc, 1, m));
    }
    return _mm512_cmpge_epu32_mask(acc, _mm512_set1_epi32(0x7f800000)) != 0;
}

/* ---- fp16 → e5m2 plain cast: e5m2 is the high byte of fp16, so RNE is integer rounding
 * of the 16-bit pattern (the carry runs into the exponent correctly, also from subnormals).
 *
 * bf16 → e5m2 plain cast: first bf16 → fp16 with VCVTPS2PH (RNE). That is exact wherever
 * the result can matter: every bf16 (8 significant bits) from 2^-17 up to 65504 is an fp16;
 * below 2^-17 both routes give 0 (fp16 cannot round past 2^-17, the e5m2 tie to 0); above,
 * fp16 overflows to Inf and both saturate. So the fp16 integer path rounds once, like the
 * reference (the exhaustive bf16 test checks it). Only for the plain cast: a scaled f32 product
 * has 24 significant bits and would be rounded twice. */
AI __m512i e5m2_words_from_f16(__m512i h, __m512i *acc) {
    __m512i a = _mm512_and_si512(h, _mm512_set1_epi16(0x7fff));
    *acc = _mm512_max_epu16(*acc, a);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi16(a, 8), _mm512_set1_epi16(1));
    __m512i r = _mm512_add_epi16(_mm512_add_epi16(a, _mm512_set1_epi16(0x7f)), odd);
    r = _mm512_min_epu16(r, _mm512_set1_epi16(0x7bff));
    __mmask32 ok = _mm512_cmple_epu16_mask(a, _mm512_set1_epi16(0x7c00)); /* not NaN */
    __m512i sr = _mm512_ternarylogic_epi32(r, h, _mm512_set1_epi16((short)0x8000), 0xf8);
    return _mm512_maskz_srli_epi16(ok, sr, 8);
}

AI __m256i f16_of_bf16(__m256i b) {
    __m512 f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
    return _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

/* 32 source words (fp16, or bf16 when bf) → e5m2 codes in the low byte of each word.
 * acc collects |pattern| of the source for the non-finite check. */
AI __m512i e5m2_words(__m512i src, int bf, __m512i *acc) {
    if (!bf) return e5m2_words_from_f16(src, acc);
    *acc = _mm512_max_epu16(*acc, _mm512_and_si512(src, _mm512_set1_epi16(0x7fff)));
    __m512i h = _mm512_inserti64x4(_mm512_castsi256_si512(f16_of_bf16(_mm512_castsi512_si256(src))),
                                   f16_of_bf16(_mm512_extracti64x4_epi64(src, 1)), 1);
    __m512i unused = _mm512_setzero_si512();
    return e5m2_words_from_f16(h, &unused);
}

AI __m128i e5m2_16(const uint16_t *p, int bf, __m512i *acc, int masked, __mmask16 m) {
    __m256i h = masked ? _mm256_maskz_loadu_epi16(m, p) : _mm256_loadu_si256((const __m256i *)p);
    __m512i w = e5m2_words(_mm512_zextsi256_si512(h), bf, acc);
    return _mm256_cvtepi16_epi8(_mm512_castsi512_si256(w));
}

AI int run_e5m2_unit(const void *src, size_t n, uint8_t *dst, size_t stride, int bf) {
    const uint16_t *s = src;
    __m512i acc = _mm512_setzero_si512();
    size_t i = 0;
    uint8_t *o = dst;
    for (; i + 64 <= n; i += 64, o += 4 * stride) {
        __m256i b0 = _mm512_cvtepi16_epi8(e5m2_words(_mm512_loadu_si512(s + i), bf, &acc));
        __m256i b1 = _mm512_cvtepi16_epi8(e5m2_words(_mm512_loadu_si512(s + i + 32), bf, &acc));
        _mm_storeu_si128((__m128i *)o, _mm256_castsi256_si128(b0));
        _mm_storeu_si128((__m128i *)(o + stride), _mm256_extracti128_si256(b0, 1));
        _mm_storeu_si128((__m128i *)(o + 2 * stride), _mm256_castsi256_si128(b1));
        _mm_storeu_si128((__m128i *)(o + 3 * stride), _mm256_extracti128_si256(b1, 1));
    }
    for (; i + 16 <= n; i += 16, o += stride) _mm_storeu_si128((__m128i *)o, e5m2_16(s + i, bf, &acc, 0, 0));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm_mask_storeu_epi8(o, m, e5m2_16(s + i, bf, &acc, 1, m));
    }
    return _mm512_cmpge_epu16_mask(acc, _mm512_set1_epi16(bf ? 0x7f80 : 0x7c00)) != 0;
}
static int run_f16_e5m2_unit(const void *src, size_t n, float inv, uint8_t *dst, size_t stride) {
    (void)inv;
    return run_e5m2_unit(src, n, dst, stride, 0);
}
static int run_bf16_e5m2_unit(const void *src, size_t n, float inv, uint8_t *dst, size_t stride) {
    (void)inv;
    return run_e5m2_unit(src, n, dst, stride, 1);
}

#define KERNEL(name, dt, e4m3, unit)                                                           \
    static int name(const void *src, size_t n, float inv, uint8_t *dst, size_t stride) {       \
        return run_f32(src, n, inv, dst, stride, dt, e4m3, unit);                              \
    }
KERNEL(k_f16_e5m2, FEATHER_F16, 0, 0)
KERNEL(k_f16_e4m3, FEATHER_F16, 1, 0)
KERNEL(k_f16_e4m3_u, FEATHER_F16, 1, 1)
KERNEL(k_bf16_e5m2, FEATHER_BF16, 0, 0)
KERNEL(k_bf16_e4m3, FEATHER_BF16, 1, 0)
KERNEL(k_bf16_e4m3_u, FEATHER_BF16, 1, 1)
KERNEL(k_f32_e5m2, FEATHER_F32, 0, 0)
KERNEL(k_f32_e5m2_u, FEATHER_F32, 0, 1)
KERNEL(k_f32_e4m3, FEATHER_F32, 1, 0)
KERNEL(k_f32_e4m3_u, FEATHER_F32, 1, 1)

static const feather_cast_fn kernels[3][2][2] = {
    {{k_f16_e5m2, run_f16_e5m2_unit}, {k_f16_e4m3, k_f16_e4m3_u}},
    {{k_bf16_e5m2, run_bf16_e5m2_unit}, {k_bf16_e4m3, k_bf16_e4m3_u}},
    {{k_f32_e5m2, k_f32_e5m2_u}, {k_f32_e4m3, k_f32_e4m3_u}},
};

feather_cast_fn feather_cast_kernel_avx512(feather_dtype dt, feather_fp8 fmt, int unit) {
    int d = dt == FEATHER_F16 ? 0 : dt == FEATHER_BF16 ? 1 : dt == FEATHER_F32 ? 2 : -1;
    if (d < 0 || (fmt != FEATHER_FP8_E5M2 && fmt != FEATHER_FP8_E4M3FN)) return NULL;
    return kernels[d][fmt][unit != 0];
}

/* ---- tile kernels (4 rows; see quant_kernels.h) ---- */

AI void store_line(uint8_t *p, __m512i v, int nt) {
    if (nt) _mm512_stream_si512((void *)p, v);
    else _mm512_storeu_si512(p, v);
}

AI int tile_f32(const void *src, size_t ss, size_t n, const float inv[4], uint8_t *dst,
                size_t step, int packed, int nt, int dt, int e4m3, int unit) {
    const size_t rs = ss * (dt == FEATHER_F32 ? 4 : 2);
    const unsigned char *r0 = src, *r1 = r0 + rs, *r2 = r1 + rs, *r3 = r2 + rs;
    const __m512 v0 = _mm512_set1_ps(inv[0]), v1 = _mm512_set1_ps(inv[1]);
    const __m512 v2 = _mm512_set1_ps(inv[2]), v3 = _mm512_set1_ps(inv[3]);
    __m512i acc = _mm512_setzero_si512();
#define C16(r, v, x) codes16(r, x, dt, e4m3, unit, v, &acc)
    for (size_t c = 0; c < n; c += 64) {
        if (packed) {
            /* line p: the four rows' pieces of columns c + 16p … */
            for (int p = 0; p < 4; p++) {
                size_t x = c + 16 * (size_t)p;
                store_line(dst + (c / 16 + (size_t)p) * step,
                           bytes_of4(C16(r0, v0, x), C16(r1, v1, x), C16(r2, v2, x), C16(r3, v3, x)), nt);
            }
        } else {
            store_line(dst + c, bytes_of4(C16(r0, v0, c), C16(r0, v0, c + 16), C16(r0, v0, c + 32), C16(r0, v0, c + 48)), nt);
            store_line(dst + step + c, bytes_of4(C16(r1, v1, c), C16(r1, v1, c + 16), C16(r1, v1, c + 32), C16(r1, v1, c + 48)), nt);
            store_line(dst + 2 * step + c, bytes_of4(C16(r2, v2, c), C16(r2, v2, c + 16), C16(r2, v2, c + 32), C16(r2, v2, c + 48)), nt);
            store_line(dst + 3 * step + c, bytes_of4(C16(r3, v3, c), C16(r3, v3, c + 16), C16(r3, v3, c + 32), C16(r3, v3, c + 48)), nt);
        }
    }
#undef C16
    return _mm512_cmpge_epu32_mask(acc, _mm512_set1_epi32(0x7f800000)) != 0;
}

/* 64 fp16 (or bf16) → 64 e5m2 bytes in order (pieces p0 … p3 in the four 128-bit lanes). */
AI __m512i row64_e5m2(const unsigned char *row, size_t c, int bf, __m512i *acc) {
    const uint16_t *p = (const uint16_t *)row + c;
    __m512i w01 = e5m2_words(_mm512_loadu_si512(p), bf, acc);
    __m512i w23 = e5m2_words(_mm512_loadu_si512(p + 32), bf, acc);
    /* per 128-bit lane: 8 bytes of w01, 8 of w23 → qwords p0lo p2lo p0hi p2hi p1lo p3lo p1hi p3hi */
    return _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7), _mm512_packus_epi16(w01, w23));
}

AI int tile_e5m2_unit(const void *src, size_t ss, size_t n, uint8_t *dst, size_t step, int packed,
                      int nt, int bf) {
    const unsigned char *r0 = src, *r1 = r0 + 2 * ss, *r2 = r1 + 2 * ss, *r3 = r2 + 2 * ss;
    __m512i acc = _mm512_setzero_si512();
    for (size_t c = 0; c < n; c += 64) {
        __m512i a = row64_e5m2(r0, c, bf, &acc), b = row64_e5m2(r1, c, bf, &acc);
        __m512i d = row64_e5m2(r2, c, bf, &acc), e = row64_e5m2(r3, c, bf, &acc);
        if (packed) {
            /* 4 × 4 transpose of 128-bit lanes: line p = (a.p, b.p, d.p, e.p) */
            __m512i t0 = _mm512_shuffle_i64x2(a, b, 0x44), t1 = _mm512_shuffle_i64x2(a, b, 0xee);
            __m512i t2 = _mm512_shuffle_i64x2(d, e, 0x44), t3 = _mm512_shuffle_i64x2(d, e, 0xee);
            uint8_t *o = dst + (c / 16) * step;
            store_line(o, _mm512_shuffle_i64x2(t0, t2, 0x88), nt);
            store_line(o + step, _mm512_shuffle_i64x2(t0, t2, 0xdd), nt);
            store_line(o + 2 * step, _mm512_shuffle_i64x2(t1, t3, 0x88), nt);
            store_line(o + 3 * step, _mm512_shuffle_i64x2(t1, t3, 0xdd), nt);
        } else {
            store_line(dst + c, a, nt);
            store_line(dst + step + c, b, nt);
            store_line(dst + 2 * step + c, d, nt);
            store_line(dst + 3 * step + c, e, nt);
        }
    }
    return _mm512_cmpge_epu16_mask(acc, _mm512_set1_epi16(bf ? 0x7f80 : 0x7c00)) != 0;
}
static int tile_f16_e5m2_unit(const void *src, size_t ss, size_t n, const float inv[4],
                              uint8_t *dst, size_t step, int packed, int nt) {
    (void)inv;
    return tile_e5m2_unit(src, ss, n, dst, step, packed, nt, 0);
}
static int tile_bf16_e5m2_unit(const void *src, size_t ss, size_t n, const float inv[4],
                               uint8_t *dst, size_t step, int packed, int nt) {
    (void)inv;
    return tile_e5m2_unit(src, ss, n, dst, step, packed, nt, 1);
}

#define TILE(name, dt, e4m3, unit)                                                             \
    static int name(const void *src, size_t ss, size_t n, const float inv[4], uint8_t *dst,     \
                    size_t step, int packed, int nt) {                                          \
        return tile_f32(src, ss, n, inv, dst, step, packed, nt, dt, e4m3, unit);                \
    }
TILE(t_f16_e5m2, FEATHER_F16, 0, 0)
TILE(t_f16_e4m3, FEATHER_F16, 1, 0)
TILE(t_f16_e4m3_u, FEATHER_F16, 1, 1)
TILE(t_bf16_e5m2, FEATHER_BF16, 0, 0)
TILE(t_bf16_e4m3, FEATHER_BF16, 1, 0)
TILE(t_bf16_e4m3_u, FEATHER_BF16, 1, 1)
TILE(t_f32_e5m2, FEATHER_F32, 0, 0)
TILE(t_f32_e5m2_u, FEATHER_F32, 0, 1)
TILE(t_f32_e4m3, FEATHER_F32, 1, 0)
TILE(t_f32_e4m3_u, FEATHER_F32, 1, 1)

static const feather_tile_fn tiles[3][2][2] = {
    {{t_f16_e5m2, tile_f16_e5m2_unit}, {t_f16_e4m3, t_f16_e4m3_u}},
    {{t_bf16_e5m2, tile_bf16_e5m2_unit}, {t_bf16_e4m3, t_bf16_e4m3_u}},
    {{t_f32_e5m2, t_f32_e5m2_u}, {t_f32_e4m3, t_f32_e4m3_u}},
};

feather_tile_fn feather_tile_kernel_avx512(feather_dtype dt, feather_fp8 fmt, int unit) {
    int d = dt == FEATHER_F16 ? 0 : dt == FEATHER_BF16 ? 1 : dt == FEATHER_F32 ? 2 : -1;
    if (d < 0 || (fmt != FEATHER_FP8_E5M2 && fmt != FEATHER_FP8_E4M3FN)) return NULL;
    return tiles[d][fmt][unit != 0];
}

/* ---- error statistics ----
 * 16 elements per step; lane j of the double accumulators takes elements j then 8 + j, the
 * order of the scalar loop. Codes decode exactly through fp16: e5m2 is the high byte of an
 * fp16, and e4m3fn's bits shifted into fp16 position give its value / 2^8. */
AI __m512 decode16(const uint8_t *q, int e4m3, int masked, __mmask16 m) {
    __m128i b = masked ? _mm_maskz_loadu_epi8(m, q) : _mm_loadu_si128((const __m128i *)q);
    __m256i w = _mm256_cvtepu8_epi16(b);
    if (!e4m3) return _mm512_cvtph_ps(_mm256_slli_epi16(w, 8));
    __m256i h = _mm256_or_si256(_mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7f)), 7),
                                _mm256_slli_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x80)), 8));
    return _mm512_mul_ps(_mm512_cvtph_ps(h), _mm512_set1_ps(256.0f));
}

AI void stats8(__m256 w, __m256 v, __m512d ds, __m512d *ss, __m512d *es, __m512d *mx) {
    __mmask8 fin = _mm256_cmpneq_epi32_mask(
        _mm256_and_si256(_mm256_castps_si256(w), _mm256_set1_epi32(0x7f800000)),
        _mm256_set1_epi32(0x7f800000));
    __m512d dw = _mm512_maskz_mov_pd(fin, _mm512_cvtps_pd(w));
    __m512d e = _mm512_maskz_sub_pd(fin, dw, _mm512_mul_pd(ds, _mm512_cvtps_pd(v)));
    *ss = _mm512_add_pd(*ss, _mm512_mul_pd(dw, dw));
    *es = _mm512_add_pd(*es, _mm512_mul_pd(e, e));
    *mx = _mm512_max_pd(*mx, _mm512_abs_pd(e));
}

AI void stats_run(const void *src, size_t n, const uint8_t *q, size_t q_stride, float s,
                  feather_fp8 fmt, feather_stat_lanes *acc, int dt) {
    const int e4m3 = fmt == FEATHER_FP8_E4M3FN;
    const __m512d ds = _mm512_set1_pd((double)s);
    __m512d ss = _mm512_loadu_pd(acc->sum_sq), es = _mm512_loadu_pd(acc->err_sq);
    __m512d mx = _mm512_set1_pd(acc->max_err);
    size_t i = 0;
    for (; i < n; i += 16, q += q_stride) {
        int masked = n - i < 16;
        __mmask16 m = masked ? (__mmask16)((1u << (n - i)) - 1) : (__mmask16)0xffff;
        __m512 w = _mm512_castsi512_ps(load16(src, i, dt, masked, m));
        __m512 v = decode16(q, e4m3, masked, m);
        stats8(_mm512_castps512_ps256(w), _mm512_castps512_ps256(v), ds, &ss, &es, &mx);
        stats8(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(w), 1)),
               _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)), ds, &ss, &es, &mx);
    }
    _mm512_storeu_pd(acc->sum_sq, ss);
    _mm512_storeu_pd(acc->err_sq, es);
    acc->max_err = _mm512_reduce_max_pd(mx);
}

static void st_f16(const void *src, size_t n, const uint8_t *q, size_t qs, float s,
                   feather_fp8 fmt, feather_stat_lanes *acc) {
    stats_run(src, n, q, qs, s, fmt, acc, FEATHER_F16);
}
static void st_bf16(const void *src, size_t n, const uint8_t *q, size_t qs, float s,
                    feather_fp8 fmt, feather_stat_lanes *acc) {
    stats_run(src, n, q, qs, s, fmt, acc, FEATHER_BF16);
}
static void st_f32(const void *src, size_t n, const uint8_t *q, size_t qs, float s,
                   feather_fp8 fmt, feather_stat_lanes *acc) {
    stats_run(src, n, q, qs, s, fmt, acc, FEATHER_F32);
}

feather_stats_fn feather_stats_kernel_avx512(feather_dtype dt) {
    return dt == FEATHER_F16 ? st_f16 : dt == FEATHER_BF16 ? st_bf16 : dt == FEATHER_F32 ? st_f32 : NULL;
}

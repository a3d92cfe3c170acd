/* AVX2 + F16C kernels of the fp8 codec; see quant_kernels.h for their contracts and
 * fp8_avx512.c for the method (the same arithmetic on 8 lanes, with compares and blends in
 * place of mask registers).
 *
 * Only reached through feather_cast_kernel / feather_stats_kernel after run-time detection. */
#include "quant_kernels.h"

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* f32 patterns (8 lanes) → fp8 codes in the low byte of each 32-bit lane. */
AI __m256i codes_from_f32(__m256i u, int e4m3) {
    const int shift = e4m3 ? 20 : 21;
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, shift), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32((1 << (shift - 1)) - 1)), odd);
    __m256i cn = _mm256_sub_epi32(_mm256_srli_epi32(r, shift),
                                  _mm256_set1_epi32(e4m3 ? (120 << 3) : (112 << 2)));
    cn = _mm256_min_epu32(cn, _mm256_set1_epi32(e4m3 ? 0x7e : 0x7b));
    const __m256 magic = _mm256_set1_ps(e4m3 ? 16384.0f : 128.0f);
    __m256i cs = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), magic)),
                                  _mm256_castps_si256(magic));
    /* a ≤ 0x7fffffff, so signed compares are unsigned ones here */
    __m256i sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(e4m3 ? 0x3c800000 : 0x38800000), a);
    __m256i c = _mm256_blendv_epi8(cn, cs, sub);
    c = _mm256_or_si256(c, _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80)));
    __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7f800000));
    return _mm256_andnot_si256(nan, c);
}

AI __m256i load8(const void *src, size_t i, int dt) {
    if (dt == FEATHER_F32) return _mm256_loadu_si256((const __m256i *)((const float *)src + i));
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)src + i));
    if (dt == FEATHER_F16) return _mm256_castps_si256(_mm256_cvtph_ps(h));
    return _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
}

AI __m256i codes8(const void *src, size_t i, int dt, int e4m3, int unit, __m256 vinv, __m256i *acc) {
    __m256i u = load8(src, i, dt);
    *acc = _mm256_max_epu32(*acc, _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)));
    if (!unit) u = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(u), vinv));
    return codes_from_f32(u, e4m3);
}

AI __m128i cast16(const void *src, size_t i, int dt, int e4m3, int unit, __m256 vinv, __m256i *acc) {
    __m256i c0 = codes8(src, i, dt, e4m3, unit, vinv, acc);
    __m256i c1 = codes8(src, i + 8, dt, e4m3, unit, vinv, acc);
    __m256i w = _mm256_packus_epi32(c0, c1); /* words 0-3 8-11 | 4-7 12-15 */
    __m128i b = _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    return _mm_shuffle_epi32(b, _MM_SHUFFLE(3, 1, 2, 0)); /* bytes 0-3 8-11 4-7 12-15 → in order */
}

AI int max_at_least(__m256i acc, uint32_t lim) {
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(1, 0, 3, 2)));
    m = _mm_max_epu32(m, _mm_shuffle_epi32(m, _MM_SHUFFLE(2, 3, 0, 1)));
    return (uint32_t)_mm_cvtsi128_si32(m) >= lim;
}

AI int run_f32(const void *src, size_t n, float inv, uint8_t *dst, size_t stride, int dt,
               int e4m3, int unit) {
    const __m256 vinv = _mm256_set1_ps(inv);
    __m256i acc = _mm256_setzero_si256();
    size_t i = 0;
    uint8_t *o = dst;
    for (; i + 32 <= n; i += 32, o += 2 * stride) {
        __m128i c0 = cast16(src, i, dt, e4m3, unit, vinv, &acc);
        __m128i c1 = cast16(src, i + 16, dt, e4m3, unit, vinv, &acc);
        _mm_storeu_si128((__m128i *)o, c0);
        _mm_storeu_si128((__m128i *)(o + stride), c1);
    }
    for (; i + 16 <= n; i += 16, o += stride)
        _mm_storeu_si128((__m128i *)o, cast16(src, i, dt, e4m3, unit, vinv, &acc));
    int bad = max_at_least(acc, 0x7f800000u);
    /* partial last piece (contiguous output only): the scalar reference */
    for (; i < n; i++, o++) {
        float w = feather_ld_as_f32((feather_dtype)dt, src, i);
        uint32_t b;
        memcpy(&b, &w, 4);
        bad |= (b & 0x7f800000u) == 0x7f800000u;
        if (!unit) w *= inv;
        *o = e4m3 ? feather_f32_to_e4m3fn(w) : feather_f32_to_e5m2(w);
    }
    return bad;
}

/* fp16 → e5m2 plain cast: integer rounding of the 16-bit pattern; bf16 → e5m2 plain cast:
 * bf16 → fp16 (VCVTPS2PH, exact where it matters) first. See fp8_avx512.c. */
AI __m128i f16_of_bf16(__m128i b) {
    __m256 f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
    return _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

AI __m128i e5m2_16(const uint16_t *p, int bf, __m256i *acc) {
    __m256i h = _mm256_loadu_si256((const __m256i *)p);
    __m256i a = _mm256_and_si256(h, _mm256_set1_epi16(0x7fff));
    *acc = _mm256_max_epu16(*acc, a); /* of the source pattern */
    if (bf) {
        h = _mm256_inserti128_si256(_mm256_castsi128_si256(f16_of_bf16(_mm256_castsi256_si128(h))),
                                    f16_of_bf16(_mm256_extracti128_si256(h, 1)), 1);
        a = _mm256_and_si256(h, _mm256_set1_epi16(0x7fff));
    }
    __m256i odd = _mm256_and_si256(_mm256_srli_epi16(a, 8), _mm256_set1_epi16(1));
    __m256i r = _mm256_add_epi16(_mm256_add_epi16(a, _mm256_set1_epi16(0x7f)), odd);
    r = _mm256_min_epu16(r, _mm256_set1_epi16(0x7bff));
    __m256i nan = _mm256_cmpgt_epi16(a, _mm256_set1_epi16(0x7c00)); /* a ≤ 0x7fff: signed ok */
    __m256i w = _mm256_srli_epi16(_mm256_or_si256(r, _mm256_and_si256(h, _mm256_set1_epi16((short)0x8000))), 8);
    w = _mm256_andnot_si256(nan, w);
    return _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}

AI int flag16(__m256i acc, uint16_t lim) {
    __m128i m = _mm_max_epu16(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
    m = _mm_minpos_epu16(_mm_xor_si128(m, _mm_set1_epi16(-1))); /* max = ~min(~x) */
    return (uint16_t)~_mm_extract_epi16(m, 0) >= lim;
}

AI int run_e5m2_unit(const void *src, size_t n, uint8_t *dst, size_t stride, int bf) {
    const uint16_t *s = src;
    __m256i acc = _mm256_setzero_si256();
    size_t i = 0;
    uint8_t *o = dst;
    for (; i + 32 <= n; i += 32, o += 2 * stride) {
        __m128i c0 = e5m2_16(s + i, bf, &acc), c1 = e5m2_16(s + i + 16, bf, &acc);
        _mm_storeu_si128((__m128i *)o, c0);
        _mm_storeu_si128((__m128i *)(o + stride), c1);
    }
    for (; i + 16 <= n; i += 16, o += stride) _mm_storeu_si128((__m128i *)o, e5m2_16(s + i, bf, &acc));
    int bad = flag16(acc, bf ? 0x7f80 : 0x7c00);
    for (; i < n; i++, o++) { /* partial last piece: the scalar reference */
        uint16_t h = feather_ld16(src, i);
        bad |= (h & (bf ? 0x7f80 : 0x7c00)) == (bf ? 0x7f80 : 0x7c00);
        *o = bf ? feather_bf16_to_e5m2(h) : feather_f16_to_e5m2(h);
    }
    return bad;
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

feather_cast_fn feather_cast_kernel_avx2(feather_dtype dt, feather_fp8 fmt, int unit) {
    int d = dt == FEATHER_F16 ? 0 : dt == FEATHER_BF16 ? 1 : dt == FEATHER_F32 ? 2 : -1;
    if (d < 0 || (fmt != FEATHER_FP8_E5M2 && fmt != FEATHER_FP8_E4M3FN)) return NULL;
    return kernels[d][fmt][unit != 0];
}

/* ---- tile kernels (4 rows; see quant_kernels.h): 16-byte pieces from the row kernels'
 * building blocks, assembled into 64-byte lines (two 32-byte stores). ---- */
AI void store_line(uint8_t *p, __m128i a, __m128i b, __m128i c, __m128i d, int nt) {
    __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
    __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(c), d, 1);
    if (nt) {
        _mm256_stream_si256((__m256i *)p, lo);
        _mm256_stream_si256((__m256i *)(p + 32), hi);
    } else {
        _mm256_storeu_si256((__m256i *)p, lo);
        _mm256_storeu_si256((__m256i *)(p + 32), hi);
    }
}

/* piece of 16 elements of a row: the f32 path, or fp16 → e5m2 integer rounding (flag words) */
AI __m128i piece(const unsigned char *row, size_t x, int dt, int e4m3, int unit, int intpath,
                 __m256 vinv, __m256i *acc) {
    if (intpath) return e5m2_16((const uint16_t *)row + x, dt == FEATHER_BF16, acc);
    return cast16(row, x, dt, e4m3, unit, vinv, acc);
}

AI int tile(const void *src, size_t ss, size_t n, const float inv[4], uint8_t *dst, size_t step,
            int packed, int nt, int dt, int e4m3, int unit, int intpath) {
    const size_t rs = ss * (dt == FEATHER_F32 ? 4 : 2);
    const unsigned char *r0 = src, *r1 = r0 + rs, *r2 = r1 + rs, *r3 = r2 + rs;
    const __m256 v0 = _mm256_set1_ps(inv[0]), v1 = _mm256_set1_ps(inv[1]);
    const __m256 v2 = _mm256_set1_ps(inv[2]), v3 = _mm256_set1_ps(inv[3]);
    __m256i acc = _mm256_setzero_si256();
#define P(r, v, x) piece(r, x, dt, e4m3, unit, intpath, v, &acc)
    for (size_t c = 0; c < n; c += 64) {
        if (packed) {
            for (int p = 0; p < 4; p++) {
                size_t x = c + 16 * (size_t)p;
                __m128i a = P(r0, v0, x), b = P(r1, v1, x), d = P(r2, v2, x), e = P(r3, v3, x);
                store_line(dst + (c / 16 + (size_t)p) * step, a, b, d, e, nt);
            }
        } else {
            for (int i = 0; i < 4; i++) {
                const unsigned char *r = i == 0 ? r0 : i == 1 ? r1 : i == 2 ? r2 : r3;
                __m256 v = i == 0 ? v0 : i == 1 ? v1 : i == 2 ? v2 : v3;
                __m128i a = P(r, v, c), b = P(r, v, c + 16), d = P(r, v, c + 32), e = P(r, v, c + 48);
                store_line(dst + (size_t)i * step + c, a, b, d, e, nt);
            }
        }
    }
#undef P
    if (intpath) return flag16(acc, dt == FEATHER_BF16 ? 0x7f80 : 0x7c00);
    return max_at_least(acc, 0x7f800000u);
}

#define TILE(name, dt, e4m3, unit, intpath)                                                    \
    static int name(const void *src, size_t ss, size_t n, const float inv[4], uint8_t *dst,     \
                    size_t step, int packed, int nt) {                                          \
        return tile(src, ss, n, inv, dst, step, packed, nt, dt, e4m3, unit, intpath);           \
    }
TILE(t_f16_e5m2, FEATHER_F16, 0, 0, 0)
TILE(t_f16_e5m2_u, FEATHER_F16, 0, 1, 1)
TILE(t_f16_e4m3, FEATHER_F16, 1, 0, 0)
TILE(t_f16_e4m3_u, FEATHER_F16, 1, 1, 0)
TILE(t_bf16_e5m2, FEATHER_BF16, 0, 0, 0)
TILE(t_bf16_e5m2_u, FEATHER_BF16, 0, 1, 1)
TILE(t_bf16_e4m3, FEATHER_BF16, 1, 0, 0)
TILE(t_bf16_e4m3_u, FEATHER_BF16, 1, 1, 0)
TILE(t_f32_e5m2, FEATHER_F32, 0, 0, 0)
TILE(t_f32_e5m2_u, FEATHER_F32, 0, 1, 0)
TILE(t_f32_e4m3, FEATHER_F32, 1, 0, 0)
TILE(t_f32_e4m3_u, FEATHER_F32, 1, 1, 0)

static const feather_tile_fn tiles[3][2][2] = {
    {{t_f16_e5m2, t_f16_e5m2_u}, {t_f16_e4m3, t_f16_e4m3_u}},
    {{t_bf16_e5m2, t_bf16_e5m2_u}, {t_bf16_e4m3, t_bf16_e4m3_u}},
    {{t_f32_e5m2, t_f32_e5m2_u}, {t_f32_e4m3, t_f32_e4m3_u}},
};

feather_tile_fn feather_tile_kernel_avx2(feather_dtype dt, feather_fp8 fmt, int unit) {
    int d = dt == FEATHER_F16 ? 0 : dt == FEATHER_BF16 ? 1 : dt == FEATHER_F32 ? 2 : -1;
    if (d < 0 || (fmt != FEATHER_FP8_E5M2 && fmt != FEATHER_FP8_E4M3FN)) return NULL;
    return tiles[d][fmt][unit != 0];
}

/* ---- error statistics: 8 elements per step, lanes 0-3 and 4-7 in two registers ---- */
/* The exact values of 8 codes: e5m2 is the high byte of an fp16; e4m3fn's S.EEEE.MMM placed as
 * the fp16 S.0EEEE.MMM0000000 is its value / 256, subnormals included (the biases differ by 8
 * and f16 subnormals scale the same way). Inf and NaN codes decode to no defined value here. */
AI __m256 decode8(const uint8_t *q, int e4m3) {
    __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)q));
    if (!e4m3) return _mm256_cvtph_ps(_mm_slli_epi16(w, 8));
    __m128i h = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x7f)), 7),
                             _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0x80)), 8));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
}

AI void stats4(__m128 w, __m128 v, __m256d ds, __m256d *ss, __m256d *es, __m256d *mx) {
    __m128i ex = _mm_and_si128(_mm_castps_si128(w), _mm_set1_epi32(0x7f800000));
    __m128i fin32 = _mm_xor_si128(_mm_cmpeq_epi32(ex, _mm_set1_epi32(0x7f800000)), _mm_set1_epi32(-1));
    __m256d fin = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(fin32));
    __m256d dw = _mm256_and_pd(fin, _mm256_cvtps_pd(w));
    __m256d e = _mm256_and_pd(fin, _mm256_sub_pd(dw, _mm256_mul_pd(ds, _mm256_cvtps_pd(v))));
    *ss = _mm256_add_pd(*ss, _mm256_mul_pd(dw, dw));
    *es = _mm256_add_pd(*es, _mm256_mul_pd(e, e));
    *mx = _mm256_max_pd(*mx, _mm256_andnot_pd(_mm256_set1_pd(-0.0), e));
}

AI void stats_run(const void *src, size_t n, const uint8_t *q, size_t q_stride, float s,
                  feather_fp8 fmt, feather_stat_lanes *acc, int dt) {
    const int e4m3 = fmt == FEATHER_FP8_E4M3FN;
    const __m256d ds = _mm256_set1_pd((double)s);
    __m256d ss0 = _mm256_loadu_pd(acc->sum_sq), ss1 = _mm256_loadu_pd(acc->sum_sq + 4);
    __m256d es0 = _mm256_loadu_pd(acc->err_sq), es1 = _mm256_loadu_pd(acc->err_sq + 4);
    __m256d mx = _mm256_set1_pd(acc->max_err);
    size_t i = 0;
    for (; i + 16 <= n; i += 16, q += q_stride) {
        for (int h = 0; h < 16; h += 8) {
            __m256 w = _mm256_castsi256_ps(load8(src, i + h, dt));
            __m256 v = decode8(q + h, e4m3);
            stats4(_mm256_castps256_ps128(w), _mm256_castps256_ps128(v), ds, &ss0, &es0, &mx);
            stats4(_mm256_extractf128_ps(w, 1), _mm256_extractf128_ps(v, 1), ds, &ss1, &es1, &mx);
        }
    }
    _mm256_storeu_pd(acc->sum_sq, ss0);
    _mm256_storeu_pd(acc->sum_sq + 4, ss1);
    _mm256_storeu_pd(acc->err_sq, es0);
    _mm256_storeu_pd(acc->err_sq + 4, es1);
    __m128d m = _mm_max_pd(_mm256_castpd256_pd128(mx), _mm256_extractf128_pd(mx, 1));
    m = _mm_max_sd(m, _mm_unpackhi_pd(m, m));
    acc->max_err = _mm_cvtsd_f64(m);
    if (i < n) feather_stats_kernel_scalar((feather_dtype)dt)(
        (const unsigned char *)src + i * (dt == FEATHER_F32 ? 4 : 2), n - i, q, q_stride, s, fmt, acc);
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

feather_stats_fn feather_stats_kernel_avx2(feather_dtype dt) {
    return dt == FEATHER_F16 ? st_f16 : dt == FEATHER_BF16 ? st_bf16 : dt == FEATHER_F32 ? st_f32 : NULL;
}

/* Decoding (quant_kernels.h): decode8's exact values (F16C, see there), then the scale as the
 * one rounding. Codes of Inf or NaN are left to the scalar kernel, group by group. */
static void decode(const uint8_t *q, size_t n, float s, feather_fp8 fmt, float *dst) {
    const int e4m3 = fmt != FEATHER_FP8_E5M2;
    const __m128i special = _mm_set1_epi8(e4m3 ? 0x7f : 0x7c);
    const __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i c = _mm_loadl_epi64((const __m128i *)(q + i));
        if (_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(c, special), special)) & 0xff)
            feather_fp8_decode_scalar(q + i, 8, s, fmt, dst + i);
        else
            _mm256_storeu_ps(dst + i, _mm256_mul_ps(decode8(q + i, e4m3), vs));
    }
    feather_fp8_decode_scalar(q + i, n - i, s, fmt, dst + i);
}

feather_decode_fn feather_decode_kernel_avx2(void) { return decode; }

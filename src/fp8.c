/* fp8 codec: the scalar reference conversions and the bulk entry points.
 *
 * The scalar functions define the semantics; the SIMD paths (fp8_avx2.c, fp8_avx512.c) and the
 * GPU kernels must give the same bytes for every input. Built with -ffp-contract=off so no
 * multiply-add is ever fused. */
#include "internal.h"
#include "feather/fp8.h"
#include "quant_kernels.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* Round a non-negative float below 2^22 to an integer, ties to even: adding 2^23 pushes the
 * fraction out of the mantissa under the default rounding mode, exactly. */
static inline uint32_t rne_small(float t) { return (uint32_t)((t + 8388608.0f) - 8388608.0f); }

float feather_fp8_max(feather_fp8 f) { return f == FEATHER_FP8_E5M2 ? FEATHER_E5M2_MAX : FEATHER_E4M3FN_MAX; }
const char *feather_fp8_name(feather_fp8 f) { return f == FEATHER_FP8_E5M2 ? "e5m2" : "e4m3fn"; }
feather_dtype feather_fp8_dtype(feather_fp8 f) { return f == FEATHER_FP8_E5M2 ? FEATHER_F8_E5M2 : FEATHER_F8_E4M3; }

float feather_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return u2f(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        /* subnormal (or zero): m · 2^-24, exact in f32 */
        float v = (float)m * u2f(0x33800000u); /* 2^-24 */
        return u2f(f2u(v) | sign);
    }
    return u2f(sign | ((e + 112) << 23) | (m << 13));
}

float feather_bf16_to_f32(uint16_t b) { return u2f((uint32_t)b << 16); }

uint16_t feather_f32_to_f16(float x) {
    uint32_t u = f2u(x), sign = (u >> 16) & 0x8000, a = u & 0x7fffffff;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00);      /* NaN stays NaN */
    if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);     /* rounds past 65504: Inf */
    if (a >= 0x38800000u) {                                     /* normal range */
        uint32_t r = a + 0xfff + ((a >> 13) & 1);
        return (uint16_t)(sign | ((r >> 13) - (112u << 10)));
    }
    return (uint16_t)(sign | rne_small(u2f(a) * 16777216.0f)); /* subnormal: steps of 2^-24 */
}

uint16_t feather_f32_to_bf16(float x) {
    uint32_t u = f2u(x);
    if ((u & 0x7fffffff) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

/* Shared shape of both fp8 encoders: mbits mantissa bits, exponent bias 'bias', largest code
 * 'maxcode' whose f32 pattern is 'maxbits', min normal pattern 'minnorm', subnormal step 2^-sub. */
static inline uint8_t f32_to_fp8(float x, unsigned mbits, unsigned bias, uint8_t maxcode,
                                 uint32_t maxbits, uint32_t minnorm, float substep_inv) {
    uint32_t u = f2u(x), a = u & 0x7fffffff;
    uint8_t sign = (uint8_t)((u >> 24) & 0x80);
    if (a > 0x7f800000u) return 0;                 /* NaN → +0 */
    if (a >= minnorm) {
        unsigned shift = 23 - mbits;
        uint32_t r = a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1);
        r &= ~((1u << shift) - 1);
        if (r > maxbits) return sign | maxcode;    /* saturate (Inf included) */
        return (uint8_t)(sign | ((r >> shift) - ((127u - bias) << mbits)));
    }
    /* Subnormal range: the codes continue linearly up to the first normal. */
    return (uint8_t)(sign | rne_small(u2f(a) * substep_inv));
}

uint8_t feather_f32_to_e5m2(float x) {
    return f32_to_fp8(x, 2, 15, 0x7b, 0x47600000u /* 57344 */, 0x38800000u /* 2^-14 */, 65536.0f);
}
uint8_t feather_f32_to_e4m3fn(float x) {
    return f32_to_fp8(x, 3, 7, 0x7e, 0x43e00000u /* 448 */, 0x3c800000u /* 2^-6 */, 512.0f);
}

uint8_t feather_f16_to_e5m2(uint16_t h) {
    /* e5m2 is the high byte of fp16: rounding is integer rounding of the 16-bit pattern. */
    uint16_t sign = h & 0x8000, a = h & 0x7fff;
    if (a > 0x7c00) return 0;
    uint32_t r = (uint32_t)a + 0x7f + ((a >> 8) & 1);
    if (r > 0x7bff) r = 0x7b00;
    return (uint8_t)((r | sign) >> 8);
}
uint8_t feather_bf16_to_e5m2(uint16_t b) { return feather_f32_to_e5m2(feather_bf16_to_f32(b)); }
uint8_t feather_f16_to_e4m3fn(uint16_t h) { return feather_f32_to_e4m3fn(feather_f16_to_f32(h)); }
uint8_t feather_bf16_to_e4m3fn(uint16_t b) { return feather_f32_to_e4m3fn(feather_bf16_to_f32(b)); }

float feather_e5m2_to_f32(uint8_t q) { return feather_f16_to_f32((uint16_t)(q << 8)); }

float feather_e4m3fn_to_f32(uint8_t q) {
    uint32_t sign = (uint32_t)(q & 0x80) << 24, e = (q >> 3) & 15, m = q & 7;
    if (e == 15 && m == 7) return u2f(sign | 0x7fc00000u);
    if (e == 0) return u2f(f2u((float)m * (1.0f / 512.0f)) | sign);
    return u2f(sign | ((e + 120) << 23) | (m << 20));
}

uint8_t feather_f32_to_fp8(float x, feather_fp8 f) {
    return f == FEATHER_FP8_E5M2 ? feather_f32_to_e5m2(x) : feather_f32_to_e4m3fn(x);
}
float feather_fp8_to_f32(uint8_t q, feather_fp8 f) {
    return f == FEATHER_FP8_E5M2 ? feather_e5m2_to_f32(q) : feather_e4m3fn_to_f32(q);
}

/* Loads go through memcpy: tensors read from a file may sit at any address. */
float feather_load_f32(feather_dtype dt, const void *p, uint64_t i) {
    uint16_t h;
    float f;
    switch (dt) {
    case FEATHER_F32: memcpy(&f, (const uint8_t *)p + 4 * i, 4); return f;
    case FEATHER_F16: memcpy(&h, (const uint8_t *)p + 2 * i, 2); return feather_f16_to_f32(h);
    case FEATHER_BF16: memcpy(&h, (const uint8_t *)p + 2 * i, 2); return feather_bf16_to_f32(h);
    /* 8-bit block scales (MXFP8's E8M0 powers of two, NVFP4's E4M3): E8M0 e is 2^(e-127), which
     * f32 holds down to e = 0 as a subnormal; 255 is its NaN. */
    case FEATHER_F8_E8M0: {
        const uint8_t e = ((const uint8_t *)p)[i];
        return e == 255 ? NAN : e ? u2f((uint32_t)e << 23) : u2f(1u << 22);
    }
    case FEATHER_F8_E4M3: return feather_e4m3fn_to_f32(((const uint8_t *)p)[i]);
    case FEATHER_F8_E5M2: return feather_e5m2_to_f32(((const uint8_t *)p)[i]);
    default: return NAN;
    }
}

uint64_t feather_count_nonfinite(feather_dtype dtype, const void *src, size_t n) {
    uint64_t c = 0;
    if (dtype == FEATHER_F16) {
        for (size_t i = 0; i < n; i++) c += (feather_ld16(src, i) & 0x7c00) == 0x7c00;
    } else if (dtype == FEATHER_BF16) {
        for (size_t i = 0; i < n; i++) c += (feather_ld16(src, i) & 0x7f80) == 0x7f80;
    } else if (dtype == FEATHER_F32) {
        /* sixteen at a time: a loop of fixed length, which the compiler vectorises at -O2 */
        size_t i = 0;
        for (; i + 16 <= n; i += 16) {
            uint32_t u[16];
            unsigned m = 0;
            memcpy(u, (const unsigned char *)src + 4 * i, sizeof u);
            for (int j = 0; j < 16; j++) m += (u[j] & 0x7f800000u) == 0x7f800000u;
            c += m;
        }
        for (; i < n; i++) {
            uint32_t u;
            memcpy(&u, (const unsigned char *)src + 4 * i, 4);
            c += (u & 0x7f800000u) == 0x7f800000u;
        }
    }
    return c;
}

static inline int nonfinite_f32(float w) { return (f2u(w) & 0x7f800000u) == 0x7f800000u; }

/* Scalar bulk cast: the reference the SIMD paths are tested against. */
void feather_fp8_cast_scalar(feather_dtype dt, const void *src, size_t n, float inv,
                             feather_fp8 fmt, uint8_t *dst) {
    if (dt == FEATHER_F16 && fmt == FEATHER_FP8_E5M2 && inv == 1.0f) {
        for (size_t i = 0; i < n; i++) dst[i] = feather_f16_to_e5m2(feather_ld16(src, i));
        return;
    }
    for (size_t i = 0; i < n; i++) dst[i] = feather_f32_to_fp8(feather_ld_as_f32(dt, src, i) * inv, fmt);
}

/* ---- scalar kernels (see quant_kernels.h) ----
 * The same arithmetic as the SIMD kernels, one lane at a time and without branches (so that
 * compilers can vectorise it where they like): integer rounding of the f32 pattern in the
 * normal range, the FPU's own rounding after adding a power of two in the subnormal range.
 * The exhaustive tests hold it to the reference functions above. */
static inline uint8_t fp8_of_bits(uint32_t u, int e4m3) {
    const unsigned shift = e4m3 ? 20 : 21;
    const float magic = e4m3 ? 16384.0f : 128.0f; /* its ulp is the fp8 subnormal step */
    uint32_t a = u & 0x7fffffffu;
    uint32_t r = a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1);
    uint32_t cn = (r >> shift) - (e4m3 ? (120u << 3) : (112u << 2));
    uint32_t maxc = e4m3 ? 0x7e : 0x7b;
    cn = cn < maxc ? cn : maxc;
    uint32_t cs = f2u(u2f(a) + magic) - f2u(magic);
    /* selects by masks: as branches they would be mispredicted on real weights, which sit on
     * both sides of the subnormal boundary */
    uint32_t sub = 0u - (uint32_t)(a < (e4m3 ? 0x3c800000u : 0x38800000u));
    uint32_t c = (cs & sub) | (cn & ~sub);
    c |= (u >> 24) & 0x80;
    return (uint8_t)(a > 0x7f800000u ? 0 : c);
}

/* fp16 → f32 pattern without branches: shifting the exponent and mantissa into place gives
 * the value · 2^-112 (normal or subnormal f32), which one exact multiply restores. */
static inline uint32_t f16_bits_to_f32_bits(uint16_t h) {
    uint32_t em = h & 0x7fffu, sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t fin = f2u(u2f(em << 13) * 0x1p112f);
    uint32_t spec = (em << 13) | 0x7f800000u; /* Inf, NaN */
    return sign | (em >= 0x7c00u ? spec : fin);
}

static inline int cast_run_scalar(feather_dtype dt, feather_fp8 fmt, int unit, const void *src,
                                  size_t n, float inv, uint8_t *dst, size_t stride) {
    int bad = 0;
    for (size_t j = 0; j * 16 < n; j++) {
        size_t m = n - j * 16 < 16 ? n - j * 16 : 16;
        uint8_t *o = dst + j * stride;
        for (size_t i = 0; i < m; i++) {
            size_t x = j * 16 + i;
            if (dt == FEATHER_F16 && fmt == FEATHER_FP8_E5M2 && unit) {
                uint16_t h = feather_ld16(src, x);
                bad |= (h & 0x7c00) == 0x7c00;
                o[i] = feather_f16_to_e5m2(h);
                continue;
            }
            uint32_t u = dt == FEATHER_F16    ? f16_bits_to_f32_bits(feather_ld16(src, x))
                         : dt == FEATHER_BF16 ? (uint32_t)feather_ld16(src, x) << 16
                                              : f2u(feather_ldf32(src, x));
            bad |= (u & 0x7f800000u) == 0x7f800000u;
            if (!unit) u = f2u(u2f(u) * inv); /* w · 1 == w exactly: 'unit' only saves the multiply */
            o[i] = fp8_of_bits(u, fmt == FEATHER_FP8_E4M3FN);
        }
    }
    return bad;
}

#define SCALAR_KERNEL(name, dt, fmt, unit)                                                   \
    static int name(const void *src, size_t n, float inv, uint8_t *dst, size_t stride) {     \
        return cast_run_scalar(dt, fmt, unit, src, n, inv, dst, stride);                     \
    }
SCALAR_KERNEL(k_f16_e5m2, FEATHER_F16, FEATHER_FP8_E5M2, 0)
SCALAR_KERNEL(k_f16_e5m2_u, FEATHER_F16, FEATHER_FP8_E5M2, 1)
SCALAR_KERNEL(k_f16_e4m3, FEATHER_F16, FEATHER_FP8_E4M3FN, 0)
SCALAR_KERNEL(k_f16_e4m3_u, FEATHER_F16, FEATHER_FP8_E4M3FN, 1)
SCALAR_KERNEL(k_bf16_e5m2, FEATHER_BF16, FEATHER_FP8_E5M2, 0)
SCALAR_KERNEL(k_bf16_e5m2_u, FEATHER_BF16, FEATHER_FP8_E5M2, 1)
SCALAR_KERNEL(k_bf16_e4m3, FEATHER_BF16, FEATHER_FP8_E4M3FN, 0)
SCALAR_KERNEL(k_bf16_e4m3_u, FEATHER_BF16, FEATHER_FP8_E4M3FN, 1)
SCALAR_KERNEL(k_f32_e5m2, FEATHER_F32, FEATHER_FP8_E5M2, 0)
SCALAR_KERNEL(k_f32_e5m2_u, FEATHER_F32, FEATHER_FP8_E5M2, 1)
SCALAR_KERNEL(k_f32_e4m3, FEATHER_F32, FEATHER_FP8_E4M3FN, 0)
SCALAR_KERNEL(k_f32_e4m3_u, FEATHER_F32, FEATHER_FP8_E4M3FN, 1)

/* [dtype F16/BF16/F32][format][unit] */
static const feather_cast_fn scalar_kernels[3][2][2] = {
    {{k_f16_e5m2, k_f16_e5m2_u}, {k_f16_e4m3, k_f16_e4m3_u}},
    {{k_bf16_e5m2, k_bf16_e5m2_u}, {k_bf16_e4m3, k_bf16_e4m3_u}},
    {{k_f32_e5m2, k_f32_e5m2_u}, {k_f32_e4m3, k_f32_e4m3_u}},
};

static int dtype_slot(feather_dtype dt) {
    return dt == FEATHER_F16 ? 0 : dt == FEATHER_BF16 ? 1 : dt == FEATHER_F32 ? 2 : -1;
}

feather_cast_fn feather_cast_kernel_scalar(feather_dtype dt, feather_fp8 fmt, int unit) {
    int d = dtype_slot(dt);
    if (d < 0 || (fmt != FEATHER_FP8_E5M2 && fmt != FEATHER_FP8_E4M3FN)) return NULL;
    return scalar_kernels[d][fmt][unit != 0];
}

/* Scalar tile kernels: the row kernel four times (no streaming stores at this level). */
static inline int tile_scalar(feather_dtype dt, feather_fp8 fmt, int unit, const void *src,
                              size_t src_stride, size_t n, const float inv[4], uint8_t *dst,
                              size_t step, int packed) {
    int bad = 0;
    size_t esz = dt == FEATHER_F32 ? 4 : 2;
    for (int i = 0; i < 4; i++)
        bad |= cast_run_scalar(dt, fmt, unit, (const unsigned char *)src + i * src_stride * esz, n,
                               inv[i], packed ? dst + 16 * i : dst + i * step, packed ? step : 16);
    return bad;
}
#define SCALAR_TILE(name, dt, fmt, unit)                                                     \
    static int name(const void *src, size_t ss, size_t n, const float inv[4], uint8_t *dst,  \
                    size_t step, int packed, int nt) {                                       \
        (void)nt;                                                                            \
        return tile_scalar(dt, fmt, unit, src, ss, n, inv, dst, step, packed);               \
    }
SCALAR_TILE(t_f16_e5m2, FEATHER_F16, FEATHER_FP8_E5M2, 0)
SCALAR_TILE(t_f16_e5m2_u, FEATHER_F16, FEATHER_FP8_E5M2, 1)
SCALAR_TILE(t_f16_e4m3, FEATHER_F16, FEATHER_FP8_E4M3FN, 0)
SCALAR_TILE(t_f16_e4m3_u, FEATHER_F16, FEATHER_FP8_E4M3FN, 1)
SCALAR_TILE(t_bf16_e5m2, FEATHER_BF16, FEATHER_FP8_E5M2, 0)
SCALAR_TILE(t_bf16_e5m2_u, FEATHER_BF16, FEATHER_FP8_E5M2, 1)
SCALAR_TILE(t_bf16_e4m3, FEATHER_BF16, FEATHER_FP8_E4M3FN, 0)
SCALAR_TILE(t_bf16_e4m3_u, FEATHER_BF16, FEATHER_FP8_E4M3FN, 1)
SCALAR_TILE(t_f32_e5m2, FEATHER_F32, FEATHER_FP8_E5M2, 0)
SCALAR_TILE(t_f32_e5m2_u, FEATHER_F32, FEATHER_FP8_E5M2, 1)
SCALAR_TILE(t_f32_e4m3, FEATHER_F32, FEATHER_FP8_E4M3FN, 0)
SCALAR_TILE(t_f32_e4m3_u, FEATHER_F32, FEATHER_FP8_E4M3FN, 1)

static const feather_tile_fn scalar_tiles[3][2][2] = {
    {{t_f16_e5m2, t_f16_e5m2_u}, {t_f16_e4m3, t_f16_e4m3_u}},
    {{t_bf16_e5m2, t_bf16_e5m2_u}, {t_bf16_e4m3, t_bf16_e4m3_u}},
    {{t_f32_e5m2, t_f32_e5m2_u}, {t_f32_e4m3, t_f32_e4m3_u}},
};

feather_tile_fn feather_tile_kernel_scalar(feather_dtype dt, feather_fp8 fmt, int unit) {
    int d = dtype_slot(dt);
    if (d < 0 || (fmt != FEATHER_FP8_E5M2 && fmt != FEATHER_FP8_E4M3FN)) return NULL;
    return scalar_tiles[d][fmt][unit != 0];
}

/* Orders streaming stores before later stores (such as the one releasing a finished job). */
void feather_stream_fence(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_sfence();
#endif
}

feather_tile_fn feather_tile_kernel(feather_simd simd, feather_dtype dt, feather_fp8 fmt, int unit) {
    feather_tile_fn f = NULL;
    if (simd >= FEATHER_SIMD_AVX512) f = feather_tile_kernel_avx512(dt, fmt, unit);
    if (!f && simd >= FEATHER_SIMD_AVX2) f = feather_tile_kernel_avx2(dt, fmt, unit);
    if (!f) f = feather_tile_kernel_scalar(dt, fmt, unit);
    return f;
}

feather_cast_fn feather_cast_kernel(feather_simd simd, feather_dtype dt, feather_fp8 fmt, int unit) {
    feather_cast_fn f = NULL;
    if (simd >= FEATHER_SIMD_AVX512) f = feather_cast_kernel_avx512(dt, fmt, unit);
    if (!f && simd >= FEATHER_SIMD_AVX2) f = feather_cast_kernel_avx2(dt, fmt, unit);
    if (!f) f = feather_cast_kernel_scalar(dt, fmt, unit);
    return f;
}

/* Decoded values as doubles, for the error statistics. Built once. */
static double values_f64[2][256];
static pthread_once_t values_once = PTHREAD_ONCE_INIT;
static void values_init(void) {
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < 256; i++) values_f64[f][i] = feather_fp8_to_f32((uint8_t)i, (feather_fp8)f);
}
const double *feather_fp8_values_f64(feather_fp8 fmt) {
    pthread_once(&values_once, values_init);
    return values_f64[fmt == FEATHER_FP8_E4M3FN];
}

static inline void stats_run_scalar(feather_dtype dt, const void *src, size_t n, const uint8_t *q,
                                    size_t q_stride, float s, feather_fp8 fmt,
                                    feather_stat_lanes *acc) {
    const double *val = feather_fp8_values_f64(fmt);
    double ds = s;
    for (size_t i = 0; i < n; i++) {
        float w = feather_ld_as_f32(dt, src, i);
        if (nonfinite_f32(w)) continue;
        double dw = w;
        double e = dw - ds * val[q[(i / 16) * q_stride + i % 16]];
        acc->sum_sq[i % 8] += dw * dw;
        acc->err_sq[i % 8] += e * e;
        double ae = fabs(e);
        if (ae > acc->max_err) acc->max_err = ae;
    }
}
#define SCALAR_STATS(name, dt)                                                               \
    static void name(const void *src, size_t n, const uint8_t *q, size_t q_stride, float s,  \
                     feather_fp8 fmt, feather_stat_lanes *acc) {                             \
        stats_run_scalar(dt, src, n, q, q_stride, s, fmt, acc);                              \
    }
SCALAR_STATS(st_f16, FEATHER_F16)
SCALAR_STATS(st_bf16, FEATHER_BF16)
SCALAR_STATS(st_f32, FEATHER_F32)

feather_stats_fn feather_stats_kernel_scalar(feather_dtype dt) {
    static const feather_stats_fn t[3] = {st_f16, st_bf16, st_f32};
    int d = dtype_slot(dt);
    return d < 0 ? NULL : t[d];
}

feather_stats_fn feather_stats_kernel(feather_simd simd, feather_dtype dt) {
    feather_stats_fn f = NULL;
    if (simd >= FEATHER_SIMD_AVX512) f = feather_stats_kernel_avx512(dt);
    if (!f && simd >= FEATHER_SIMD_AVX2) f = feather_stats_kernel_avx2(dt);
    if (!f) f = feather_stats_kernel_scalar(dt);
    return f;
}

feather_status feather_fp8_cast(const feather_ctx *ctx, feather_dtype dt, const void *src,
                                size_t n, float inv, feather_fp8 fmt, uint8_t *dst) {
    feather_cast_fn f = feather_cast_kernel(feather_ctx_simd(ctx), dt, fmt, inv == 1.0f);
    if (!f) return FEATHER_E_ARG;
    f(src, n, inv, dst, 16);
    return FEATHER_OK;
}

void feather_fp8_decode_scalar(const uint8_t *q, size_t n, float s, feather_fp8 fmt, float *dst) {
    for (size_t i = 0; i < n; i++) dst[i] = feather_fp8_to_f32(q[i], fmt) * s;
}

feather_decode_fn feather_decode_kernel(feather_simd simd) {
    return simd >= FEATHER_SIMD_AVX2 ? feather_decode_kernel_avx2() : feather_fp8_decode_scalar;
}

void feather_fp8_decode(const uint8_t *q, size_t n, float scale, feather_fp8 fmt, float *dst) {
    feather_decode_kernel(feather_simd_detect())(q, n, scale, fmt, dst);
}

/* Prepacked layout, casting a tensor with given scales, dequantisation, statistics and the
 * NaN/Inf policy. */
#include "test.h"
#include "feather/feather.h"
#include "internal.h"
#include "quant_kernels.h"

#include <math.h>
#include <stdlib.h>

static uint64_t rs = 0x243f6a8885a308d3ull;
static uint64_t rnd(void) {
    uint64_t z = (rs += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* aligned_alloc wants a size that is a multiple of the alignment */
static void *alloc64(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64); }

static double gauss(void) { /* Box-Muller */
    double u = ((rnd() >> 11) + 1) * 0x1p-53, v = (rnd() >> 11) * 0x1p-53;
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static const uint64_t SHAPES[][2] = {{1, 16}, {3, 32}, {17, 48}, {16, 256}, {33, 272}, {40, 1024}, {5, 4096}};
#define NSHAPES (sizeof SHAPES / sizeof *SHAPES)

TEST(pack_index_formula_and_round_trip) {
    for (size_t s = 0; s < NSHAPES; s++) {
        uint64_t n = SHAPES[s][0], k = SHAPES[s][1];
        uint8_t *plain = malloc(n * k), *packed = malloc(n * k), *back = malloc(n * k);
        REQUIRE(plain && packed && back);
        for (uint64_t i = 0; i < n * k; i++) plain[i] = (uint8_t)rnd();
        memset(packed, 0, n * k);
        feather_pack(plain, n, k, packed);
        int bad = 0;
        for (uint64_t r = 0; r < n && !bad; r++)
            for (uint64_t c = 0; c < k; c++)
                if (packed[(c / 16) * 16 * n + 16 * r + c % 16] != plain[r * k + c]) {
                    test_fail(__FILE__, __LINE__, "(%llu,%llu) element (%llu,%llu) misplaced",
                              (unsigned long long)n, (unsigned long long)k, (unsigned long long)r,
                              (unsigned long long)c);
                    bad = 1;
                    break;
                }
        /* packed[kb][n][i] = Q[n][16 kb + i], read as a 3-D array */
        uint64_t kb = k / 16 - 1, rr = n - 1;
        CHECK_EQ_U(packed[kb * n * 16 + rr * 16 + 15], plain[rr * k + 16 * kb + 15]);
        memset(back, 0, n * k);
        feather_unpack(packed, n, k, back);
        CHECK(memcmp(back, plain, n * k) == 0);
        free(plain);
        free(packed);
        free(back);
    }
}

/* A weight of n × k with normal values of varied magnitude per row. */
static void *make_weight(feather_dtype dt, uint64_t n, uint64_t k) {
    size_t esz = dt == FEATHER_F32 ? 4 : 2;
    unsigned char *w = malloc(n * k * esz);
    if (!w) return NULL;
    for (uint64_t r = 0; r < n; r++) {
        double rowscale = ldexp(1.0, (int)(rnd() % 24) - 16);
        for (uint64_t c = 0; c < k; c++) {
            float v = (float)(gauss() * rowscale);
            if (rnd() % 64 == 0) v = 0.0f;
            uint64_t i = r * k + c;
            if (dt == FEATHER_F32) memcpy(w + 4 * i, &v, 4);
            else {
                uint16_t h = dt == FEATHER_F16 ? feather_f32_to_f16(v) : feather_f32_to_bf16(v);
                memcpy(w + 2 * i, &h, 2);
            }
        }
    }
    return w;
}

static float w_at(feather_dtype dt, const void *w, uint64_t i) {
    const unsigned char *p = w;
    if (dt == FEATHER_F32) { float f; memcpy(&f, p + 4 * i, 4); return f; }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return dt == FEATHER_F16 ? feather_f16_to_f32(h) : feather_bf16_to_f32(h);
}

static uint64_t nscales_for(feather_scale_mode m, unsigned g, uint64_t n, uint64_t k) {
    return m == FEATHER_SCALE_CHANNEL ? n : m == FEATHER_SCALE_BLOCK ? n * (k / g) : 1;
}
static float scale_for(feather_scale_mode m, unsigned g, const float *s, uint64_t k, uint64_t r, uint64_t c) {
    if (m == FEATHER_SCALE_CHANNEL) return s[r];
    if (m == FEATHER_SCALE_BLOCK) return s[r * (k / g) + c / g];
    return s[0];
}

static const feather_scale_mode MODES[] = {FEATHER_SCALE_NONE, FEATHER_SCALE_ABSMAX, FEATHER_SCALE_TENSOR,
                                           FEATHER_SCALE_CHANNEL, FEATHER_SCALE_BLOCK, FEATHER_SCALE_BLOCK};
static const unsigned GROUPS[] = {0, 0, 0, 0, 16, 64};

TEST(pack_quantize_with_every_mode_dtype_level) {
    const feather_dtype dts[3] = {FEATHER_F16, FEATHER_BF16, FEATHER_F32};
    /* K = 320: all 64-column steps; K = 336: a 16-column tail; N = 37: leftover rows */
    const uint64_t shapes[2][2] = {{37, 320}, {22, 336}};
    feather_ctx *ctx = feather_ctx_new(2);
    REQUIRE(ctx);
    for (int sh = 0; sh < 2; sh++) {
        const uint64_t n = shapes[sh][0], k = shapes[sh][1];
        uint8_t *plain = malloc(n * k), *packed = malloc(n * k), *repacked = malloc(n * k), *ref = malloc(n * k);
        float *scales = malloc(n * k * sizeof *scales), *d1 = malloc(n * k * 4), *d2 = malloc(n * k * 4);
        REQUIRE(plain && packed && repacked && ref && scales && d1 && d2);
        for (int d = 0; d < 3; d++) {
            void *w = make_weight(dts[d], n, k);
            REQUIRE(w);
            for (size_t m = 0; m < sizeof MODES / sizeof *MODES; m++) {
                for (int f = 0; f < 2; f++) {
                    feather_quant_options o = {.format = (feather_fp8)f, .mode = MODES[m], .group = GROUPS[m], .name = "w"};
                    if (o.group && k % o.group) continue;
                    uint64_t ns = nscales_for(o.mode, o.group, n, k);
                    for (uint64_t i = 0; i < ns; i++)
                        scales[i] = o.mode == FEATHER_SCALE_NONE ? 1.0f : (float)ldexp(1.0 + (rnd() % 1000) / 1000.0, (int)(rnd() % 20) - 22);
                    /* the definition, element by element, with the scalar codec */
                    for (uint64_t r = 0; r < n; r++)
                        for (uint64_t c = 0; c < k; c++) {
                            float inv = 1.0f / scale_for(o.mode, o.group, scales, k, r, c);
                            ref[r * k + c] = feather_f32_to_fp8(w_at(dts[d], w, r * k + c) * inv, o.format);
                        }
                    for (int lv = 0; lv <= (int)feather_simd_cpu(); lv++) {
                        REQUIRE(feather_ctx_set_simd(ctx, (feather_simd)lv) == FEATHER_OK);
                        feather_error err = {0};
                        memset(plain, 0xee, n * k);
                        memset(packed, 0xee, n * k);
                        CHECK(feather_quantize_with(ctx, &o, dts[d], w, n, k, scales, 0, plain, NULL, &err) == FEATHER_OK);
                        CHECK(feather_quantize_with(ctx, &o, dts[d], w, n, k, scales, 1, packed, NULL, &err) == FEATHER_OK);
                        feather_pack(plain, n, k, repacked);
                        if (memcmp(plain, ref, n * k) || memcmp(packed, repacked, n * k)) {
                            test_fail(__FILE__, __LINE__, "%s %s mode %d g %u %s: plain %s, packed %s",
                                      feather_simd_name((feather_simd)lv), feather_dtype_name(dts[d]),
                                      (int)o.mode, o.group, feather_fp8_name(o.format),
                                      memcmp(plain, ref, n * k) ? "differs" : "ok",
                                      memcmp(packed, repacked, n * k) ? "differs" : "ok");
                            continue;
                        }
                        /* dequantisation: packed and plain agree, and equal f32(q)·s */
                        feather_dequantize(plain, 0, o.format, o.mode, o.group, scales, n, k, d1);
                        feather_dequantize(packed, 1, o.format, o.mode, o.group, scales, n, k, d2);
                        CHECK(memcmp(d1, d2, n * k * 4) == 0);
                        for (uint64_t i = 0; i < n * k; i++) {
                            float want = feather_fp8_to_f32(plain[i], o.format) *
                                         scale_for(o.mode, o.group, scales, k, i / k, i % k);
                            if (d1[i] != want) {
                                test_fail(__FILE__, __LINE__, "dequantize element %llu", (unsigned long long)i);
                                break;
                            }
                        }
                    }
                }
            }
            free(w);
        }
        free(plain); free(packed); free(repacked); free(ref); free(scales); free(d1); free(d2);
    }
    feather_ctx_free(ctx);
}

TEST(pack_quantize_plain_any_k) {
    /* plain output needs no K % 16: every tail length, with and without 64-column steps */
    feather_ctx *ctx = feather_ctx_new(2);
    REQUIRE(ctx);
    for (uint64_t k = 1; k <= 150; k += k < 40 ? 1 : 7) {
        uint64_t n = 5;
        void *w = make_weight(FEATHER_BF16, n, k);
        uint8_t q[5 * 150], want[5 * 150];
        float s[5];
        for (int r = 0; r < 5; r++) s[r] = 0.001f * (float)(r + 1);
        feather_quant_options o = {.format = FEATHER_FP8_E4M3FN, .mode = FEATHER_SCALE_CHANNEL};
        for (uint64_t i = 0; i < n * k; i++)
            want[i] = feather_f32_to_e4m3fn(w_at(FEATHER_BF16, w, i) * (1.0f / s[i / k]));
        for (int lv = 0; lv <= (int)feather_simd_cpu(); lv++) {
            feather_ctx_set_simd(ctx, (feather_simd)lv);
            feather_quant_stats st;
            CHECK(feather_quantize_with(ctx, &o, FEATHER_BF16, w, n, k, s, 0, q, &st, NULL) == FEATHER_OK);
            CHECK(memcmp(q, want, n * k) == 0);
        }
        feather_error err = {0};
        CHECK(feather_quantize_with(ctx, &o, FEATHER_BF16, w, n, k, s, 1, q, NULL, &err) ==
              (k % 16 ? FEATHER_E_ARG : FEATHER_OK));
        free(w);
    }
    feather_ctx_free(ctx);
}

/* Statistics against a direct double-precision recomputation, and bit-identical across SIMD
 * levels, thread counts and output layouts. */
TEST(pack_quantize_stats) {
    const uint64_t n = 70, k = 512;
    const feather_dtype dts[3] = {FEATHER_F16, FEATHER_BF16, FEATHER_F32};
    uint8_t *q = malloc(n * k);
    float *scales = malloc(n * (k / 32) * sizeof *scales);
    REQUIRE(q && scales);
    for (int d = 0; d < 3; d++) {
        void *w = make_weight(dts[d], n, k);
        REQUIRE(w);
        /* a few NaN/Inf, allowed: they are counted and left out of the sums */
        unsigned char *wb = w;
        size_t esz = dts[d] == FEATHER_F32 ? 4 : 2;
        const uint64_t at[3] = {5, 777, n * k - 1};
        for (int i = 0; i < 3; i++) {
            if (dts[d] == FEATHER_F32) { float v = i == 1 ? -INFINITY : NAN; memcpy(wb + 4 * at[i], &v, 4); }
            else { uint16_t v = dts[d] == FEATHER_F16 ? (i == 1 ? 0xfc00 : 0x7e00) : (i == 1 ? 0xff80 : 0x7fc0); memcpy(wb + esz * at[i], &v, 2); }
        }
        feather_quant_options o = {.format = FEATHER_FP8_E5M2, .mode = FEATHER_SCALE_BLOCK, .group = 32,
                                   .allow_nonfinite = 1};
        for (uint64_t i = 0; i < n * (k / 32); i++) scales[i] = (float)ldexp(1.0 + (rnd() % 100) / 100.0, -(int)(rnd() % 20));
        feather_quant_stats first = {0};
        int have_first = 0;
        for (int threads = 1; threads <= 3; threads++) {
            feather_ctx *ctx = feather_ctx_new(threads);
            REQUIRE(ctx);
            for (int lv = 0; lv <= (int)feather_simd_cpu(); lv++) {
                feather_ctx_set_simd(ctx, (feather_simd)lv);
                for (int packed = 0; packed < 2; packed++) {
                    feather_quant_stats st;
                    memset(&st, 0xff, sizeof st);
                    REQUIRE(feather_quantize_with(ctx, &o, dts[d], w, n, k, scales, packed, q, &st, NULL) == FEATHER_OK);
                    if (!have_first) {
                        first = st;
                        have_first = 1;
                        /* recompute in double from the plain codes */
                        double ss = 0, es = 0, mx = 0;
                        for (uint64_t i = 0; i < n * k; i++) {
                            float wv = w_at(dts[d], w, i);
                            if (!isfinite(wv)) continue;
                            double s = scales[(i / k) * (k / 32) + (i % k) / 32];
                            double e = (double)wv - s * (double)feather_e5m2_to_f32(q[i]);
                            ss += (double)wv * wv;
                            es += e * e;
                            if (fabs(e) > mx) mx = fabs(e);
                        }
                        CHECK_EQ_U(st.nonfinite, 3);
                        CHECK(fabs(st.sum_sq - ss) <= 1e-12 * ss);
                        CHECK(fabs(st.err_sq - es) <= 1e-12 * es);
                        CHECK(st.max_abs_err == mx);
                        CHECK(es > 0 && es < ss);
                    } else if (memcmp(&st, &first, sizeof st)) {
                        test_fail(__FILE__, __LINE__, "%s stats differ: threads %d level %s packed %d",
                                  feather_dtype_name(dts[d]), threads, feather_simd_name((feather_simd)lv), packed);
                    }
                }
            }
            feather_ctx_free(ctx);
        }
        free(w);
    }
    free(q);
    free(scales);
}

TEST(pack_quantize_nonfinite_policy) {
    const uint64_t n = 20, k = 64;
    feather_ctx *ctx = feather_ctx_new(2);
    REQUIRE(ctx);
    void *w = make_weight(FEATHER_F16, n, k);
    REQUIRE(w);
    uint16_t *h = w;
    h[3] = 0x7e01;           /* NaN */
    h[n * k / 2] = 0x7c00;   /* +Inf */
    h[n * k - 1] = 0xfc00;   /* -Inf */
    uint8_t q[20 * 64];
    float s = 1.0f;
    feather_quant_options o = {.format = FEATHER_FP8_E5M2, .mode = FEATHER_SCALE_TENSOR, .name = "blk.0.w\n"};
    for (int lv = 0; lv <= (int)feather_simd_cpu(); lv++) {
        feather_ctx_set_simd(ctx, (feather_simd)lv);
        for (int packed = 0; packed < 2; packed++) {
            feather_error err = {0};
            o.allow_nonfinite = 0;
            CHECK(feather_quantize_with(ctx, &o, FEATHER_F16, w, n, k, &s, packed, q, NULL, &err) == FEATHER_E_INVALID);
            CHECK_STR_CONTAINS(err.message, "tensor 'blk.0.w\\x0a': 3 NaN/Inf values (use --allow-nonfinite");
            CHECK(strchr(err.message, '\n') == NULL);
            o.allow_nonfinite = 1;
            feather_quant_stats st;
            CHECK(feather_quantize_with(ctx, &o, FEATHER_F16, w, n, k, &s, packed, q, &st, &err) == FEATHER_OK);
            CHECK_EQ_U(st.nonfinite, 3);
            uint8_t plain[20 * 64];
            if (packed) feather_unpack(q, n, k, plain);
            else memcpy(plain, q, sizeof plain);
            CHECK_EQ_U(plain[3], 0x00);
            CHECK_EQ_U(plain[n * k / 2], 0x7b);
            CHECK_EQ_U(plain[n * k - 1], 0xfb);
            /* with a scale ≠ 1 (the f32 path) the same */
            float s2 = 0.25f;
            CHECK(feather_quantize_with(ctx, &o, FEATHER_F16, w, n, k, &s2, 0, plain, &st, &err) == FEATHER_OK);
            CHECK_EQ_U(st.nonfinite, 3);
            CHECK_EQ_U(plain[3], 0x00);
            CHECK_EQ_U(plain[n * k - 1], 0xfb);
        }
    }
    /* a finite weight that overflows only after scaling saturates and is not an error */
    uint16_t big[16];
    for (int i = 0; i < 16; i++) big[i] = 0x7bff; /* 65504 */
    float tiny = 1e-3f;
    o.allow_nonfinite = 0;
    CHECK(feather_quantize_with(ctx, &o, FEATHER_F16, big, 1, 16, &tiny, 1, q, NULL, NULL) == FEATHER_OK);
    CHECK_EQ_U(q[7], 0x7b);
    free(w);
    feather_ctx_free(ctx);
}

TEST(pack_quantize_bad_arguments) {
    feather_ctx *ctx = feather_ctx_new(1);
    REQUIRE(ctx);
    uint16_t w[64] = {0};
    uint8_t q[64];
    float s[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    feather_error err = {0};
    feather_quant_options o = {.format = FEATHER_FP8_E5M2, .mode = FEATHER_SCALE_BLOCK, .group = 24, .name = "x"};
    CHECK(feather_quantize_with(ctx, &o, FEATHER_F16, w, 1, 48, s, 0, q, NULL, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "tensor 'x': block size 24");
    o.group = 32;
    CHECK(feather_quantize_with(ctx, &o, FEATHER_F16, w, 1, 48, s, 0, q, NULL, &err) == FEATHER_E_ARG);
    o.mode = FEATHER_SCALE_CHANNEL;
    s[1] = 0.0f;
    CHECK(feather_quantize_with(ctx, &o, FEATHER_F16, w, 2, 32, s, 0, q, NULL, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "scale 1");
    s[1] = NAN;
    CHECK(feather_quantize_with(ctx, &o, FEATHER_F16, w, 2, 32, s, 0, q, NULL, &err) == FEATHER_E_ARG);
    s[1] = 1;
    CHECK(feather_quantize_with(ctx, &o, FEATHER_F8_E5M2, w, 2, 32, s, 0, q, NULL, &err) == FEATHER_E_ARG);
    CHECK(feather_quantize_with(ctx, &o, FEATHER_F16, w, 2, 32, NULL, 0, q, NULL, &err) == FEATHER_E_ARG);
    CHECK(feather_quantize_with(ctx, &o, FEATHER_F16, w, 2, 32, s, 0, q, NULL, &err) == FEATHER_OK);
    feather_quant_stats st;
    CHECK(feather_quantize_with(ctx, &o, FEATHER_F16, w, 0, 32, s, 1, q, &st, &err) == FEATHER_OK);
    CHECK(st.sum_sq == 0 && st.nonfinite == 0);
    feather_ctx_free(ctx);
}

/* The 4-row tile kernels (with and without streaming stores) against the one-row kernels. */
TEST(pack_tile_kernels_match_row_kernels) {
    const feather_dtype dts[3] = {FEATHER_F16, FEATHER_BF16, FEATHER_F32};
    enum { ROWS = 4, COLS = 192, N = 8 };
    for (int d = 0; d < 3; d++) {
        void *w = make_weight(dts[d], ROWS, COLS);
        REQUIRE(w);
        /* a NaN in row 2 */
        if (dts[d] == FEATHER_F32) { float v = NAN; memcpy((char *)w + 4 * (2 * COLS + 70), &v, 4); }
        else { uint16_t v = 0x7fc1; memcpy((char *)w + 2 * (2 * COLS + 70), &v, 2); }
        for (int lv = 0; lv <= (int)feather_simd_cpu(); lv++) {
            for (int f = 0; f < 2; f++) {
                for (int unit = 0; unit < 2; unit++) {
                    float inv[4] = {1, 1, 1, 1};
                    if (!unit) { inv[0] = 3.5f; inv[1] = 0.01f; inv[2] = 1.0f; inv[3] = 1e4f; }
                    feather_tile_fn t = feather_tile_kernel((feather_simd)lv, dts[d], (feather_fp8)f, unit);
                    feather_cast_fn rk = feather_cast_kernel(FEATHER_SIMD_SCALAR, dts[d], (feather_fp8)f, 0);
                    REQUIRE(t && rk);
                    _Alignas(64) uint8_t want[N * COLS], got[N * COLS];
                    for (int packed = 0; packed < 2; packed++) {
                        size_t step = packed ? 16 * N : COLS;
                        memset(want, 0x5a, sizeof want);
                        int wbad = 0;
                        for (int i = 0; i < ROWS; i++)
                            wbad |= rk((char *)w + (size_t)i * COLS * (dts[d] == FEATHER_F32 ? 4 : 2), COLS, inv[i],
                                       packed ? want + 16 * i : want + i * step, packed ? step : 16);
                        for (int nt = 0; nt < 2; nt++) {
                            memset(got, 0x5a, sizeof got);
                            int bad = t(w, COLS, COLS, inv, got, step, packed, nt);
                            feather_stream_fence();
                            if (memcmp(got, want, sizeof got) || !bad != !wbad || !bad)
                                test_fail(__FILE__, __LINE__, "%s %s→%s unit %d packed %d nt %d: %s",
                                          feather_simd_name((feather_simd)lv), feather_dtype_name(dts[d]),
                                          feather_fp8_name((feather_fp8)f), unit, packed, nt,
                                          memcmp(got, want, sizeof got) ? "bytes differ" : "flag");
                        }
                    }
                }
            }
        }
        free(w);
    }
}

/* A tensor large enough for streaming stores (and a misaligned output that must avoid them):
 * same bytes as the small-tensor path. */
TEST(pack_quantize_large_streaming) {
    const uint64_t n = 260, k = 4096; /* past FEATHER_STREAM_MIN */
    REQUIRE(n * k >= FEATHER_STREAM_MIN);
    uint16_t *w = malloc(n * k * 2);
    REQUIRE(w);
    for (uint64_t i = 0; i < n * k; i++) { /* cheap varied fp16 values around ±[2^-9, 2^7) */
        uint64_t r = rnd();
        w[i] = (uint16_t)((r & 0x8000) | (0x1800 + (r >> 20) % 0x3c00));
    }
    uint8_t *plain = alloc64(n * k), *packed = alloc64(n * k + 64), *re = malloc(n * k);
    REQUIRE(w && plain && packed && re);
    feather_ctx *ctx = feather_ctx_new(2);
    REQUIRE(ctx);
    /* streaming stores exist at the SIMD levels only */
    if (feather_simd_cpu() == FEATHER_SIMD_SCALAR) test_skip("no AVX2: no streaming-store path to test");
    for (int lv = FEATHER_SIMD_AVX2; lv <= (int)feather_simd_cpu(); lv++) {
        feather_ctx_set_simd(ctx, (feather_simd)lv);
        for (int sc = 0; sc < 2; sc++) {
            float s = sc ? 0.37f : 1.0f;
            feather_quant_options o = {.format = FEATHER_FP8_E5M2, .mode = FEATHER_SCALE_TENSOR};
            REQUIRE(feather_quantize_with(ctx, &o, FEATHER_F16, w, n, k, &s, 0, plain, NULL, NULL) == FEATHER_OK);
            /* row by row with the bulk cast */
            int bad = 0;
            for (uint64_t r = 0; r < n && !bad; r++) {
                feather_fp8_cast(NULL, FEATHER_F16, w + r * k, k, 1.0f / s, o.format, re + r * k);
                bad = memcmp(re + r * k, plain + r * k, k) != 0;
            }
            CHECK(!bad);
            /* q at every 16-byte phase of a cache line, and unaligned */
            const int offs[5] = {0, 16, 32, 48, 1};
            for (int oi = 0; oi < 5; oi++) {
                int off = offs[oi];
                REQUIRE(feather_quantize_with(ctx, &o, FEATHER_F16, w, n, k, &s, 1, packed + off, NULL, NULL) == FEATHER_OK);
                feather_unpack(packed + off, n, k, re);
                if (memcmp(re, plain, n * k)) test_fail(__FILE__, __LINE__, "%s scale %g packed offset %d",
                                                        feather_simd_name((feather_simd)lv), (double)s, off);
                /* plain output at the same offset (the row-start phase of its whole lines) */
                REQUIRE(feather_quantize_with(ctx, &o, FEATHER_F16, w, n, k, &s, 0, packed + off, NULL, NULL) == FEATHER_OK);
                if (memcmp(packed + off, plain, n * k)) test_fail(__FILE__, __LINE__, "%s scale %g plain offset %d",
                                                                  feather_simd_name((feather_simd)lv), (double)s, off);
            }
        }
    }
    feather_ctx_free(ctx);
    free(w); free(plain); free(packed); free(re);
}

/* Layouts big enough for streaming stores, every 16-byte phase of either buffer, K not a
 * multiple of 64 and N not a multiple of 4, and the memcpy path (FEATHER_SIMD=scalar). */
TEST(pack_large_layouts_every_alignment) {
    const uint64_t shapes[3][2] = {{260, 4096}, {258, 4112}, {131, 8208}};
    for (int sh = 0; sh < 3; sh++) {
        uint64_t n = shapes[sh][0], k = shapes[sh][1];
        uint8_t *plain = malloc(n * k), *pbuf = alloc64(n * k + 128), *ubuf = alloc64(n * k + 128);
        REQUIRE(plain && pbuf && ubuf);
        for (uint64_t i = 0; i < n * k; i += 8) {
            uint64_t r = rnd();
            memcpy(plain + i, &r, n * k - i < 8 ? n * k - i : 8);
        }
        const int offs[5] = {0, 16, 32, 48, 1};
        for (int env = 0; env < 2; env++) {
            if (env) setenv("FEATHER_SIMD", "scalar", 1);
            for (int oi = 0; oi < 5; oi++) {
                uint8_t *packed = pbuf + offs[oi], *back = ubuf + offs[(oi + 1) % 5];
                feather_pack(plain, n, k, packed);
                int bad = 0;
                for (uint64_t r = 0; r < n && !bad; r += 7)
                    for (uint64_t c = 0; c < k; c++)
                        if (packed[(c / 16) * 16 * n + 16 * r + c % 16] != plain[r * k + c]) { bad = 1; break; }
                feather_unpack(packed, n, k, back);
                if (bad || memcmp(back, plain, n * k))
                    test_fail(__FILE__, __LINE__, "(%llu,%llu) offsets %d/%d %s: %s", (unsigned long long)n,
                              (unsigned long long)k, offs[oi], offs[(oi + 1) % 5], env ? "scalar" : "simd",
                              bad ? "pack misplaced" : "round trip differs");
            }
            if (env) unsetenv("FEATHER_SIMD");
        }
        free(plain); free(pbuf); free(ubuf);
    }
}

TEST(pack_quantize_cancelled) {
    feather_ctx *ctx = feather_ctx_new(2);
    REQUIRE(ctx);
    uint16_t w[64 * 64] = {0};
    uint8_t q[64 * 64];
    feather_quant_options o = {.format = FEATHER_FP8_E5M2, .mode = FEATHER_SCALE_NONE};
    feather_error err = {0};
    feather_cancel();
    CHECK(feather_quantize_with(ctx, &o, FEATHER_F16, w, 64, 64, NULL, 1, q, NULL, &err) == FEATHER_E_CANCELLED);
    feather_cancel_reset();
    CHECK(feather_quantize_with(ctx, &o, FEATHER_F16, w, 64, 64, NULL, 1, q, NULL, &err) == FEATHER_OK);
    feather_ctx_free(ctx);
}

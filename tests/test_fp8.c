/* fp8 codec: every path (scalar, AVX2, AVX-512) against a brute-force reference written here:
 * the fp8 values are enumerated as doubles and the nearest one is picked, ties to the even
 * code, saturating at the largest finite code, NaN → +0. */
#include "test.h"
#include "feather/feather.h"
#include "internal.h"
#include "quant_kernels.h"

#include <math.h>
#include <stdlib.h>

/* ---- reference ---- */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { /* splitmix64 */
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct { int e4m3; int maxcode; double val[128]; } fp8ref;
static fp8ref REF[2];

static void ref_init(void) {
    for (int f = 0; f < 2; f++) {
        fp8ref *r = &REF[f];
        r->e4m3 = f;
        int mb = f ? 3 : 2, bias = f ? 7 : 15;
        r->maxcode = f ? 0x7e : 0x7b;
        for (int c = 0; c <= r->maxcode; c++) {
            int e = c >> mb, m = c & ((1 << mb) - 1);
            r->val[c] = e == 0 ? ldexp(m, 1 - bias - mb) : ldexp((1 << mb) + m, e - bias - mb);
        }
    }
}

static uint8_t ref_fp8(double x, int e4m3) {
    const fp8ref *r = &REF[e4m3];
    if (isnan(x)) return 0;
    uint8_t sign = signbit(x) ? 0x80 : 0;
    double ax = fabs(x);
    if (ax >= r->val[r->maxcode]) return sign | (uint8_t)r->maxcode;
    int lo = 0, hi = r->maxcode; /* val[lo] <= ax < val[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (r->val[mid] <= ax) lo = mid;
        else hi = mid;
    }
    double midv = (r->val[lo] + r->val[hi]) / 2; /* exact: few significant bits */
    int c = ax < midv ? lo : ax > midv ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | (uint8_t)c;
}

/* fp16 / bf16 values decoded here, independently of the library. */
static double f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double s = h & 0x8000 ? -1 : 1;
    if (e == 31) return m ? NAN : s * INFINITY;
    return s * (e ? ldexp(1024 + m, e - 25) : ldexp(m, -24));
}
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static double bf16_value(uint16_t b) { return (double)bits_f32((uint32_t)b << 16); }

/* Every SIMD level this CPU has, scalar first. */
static int levels(feather_simd *out) {
    int n = 0;
    for (int s = FEATHER_SIMD_SCALAR; s <= (int)feather_simd_cpu(); s++) out[n++] = (feather_simd)s;
    if (n < 3) printf("    NOTE: CPU lacks %s; only %d SIMD level(s) tested\n",
                      n < 2 ? "AVX2" : "AVX-512", n);
    return n;
}

static feather_ctx *ctx_at(feather_simd s) {
    feather_ctx *c = feather_ctx_new(1);
    if (c && feather_ctx_set_simd(c, s) != FEATHER_OK) {
        feather_ctx_free(c);
        return NULL;
    }
    return c;
}

static const float INVS[] = {1.0f, 0.5f, 3.0f, 1.0f / 3.0f, 1e-3f, 1234.567f, 65536.0f, 1e-30f, 7.0e30f};

/* All 65,536 patterns of a 16-bit dtype, every format, level and a few inverse scales. */
static void exhaustive16(feather_dtype dt) {
    ref_init();
    static uint16_t src[65536];
    static uint8_t got[65536], want[65536];
    for (int i = 0; i < 65536; i++) src[i] = (uint16_t)i;
    feather_simd lv[3];
    int nl = levels(lv);
    for (int f = 0; f < 2; f++) {
        for (size_t si = 0; si < sizeof INVS / sizeof *INVS; si++) {
            float inv = INVS[si];
            for (int i = 0; i < 65536; i++) {
                double x = dt == FEATHER_F16 ? f16_value((uint16_t)i) : bf16_value((uint16_t)i);
                float p = (float)x * inv; /* the definition: one f32 multiply */
                want[i] = ref_fp8(p, f);
            }
            for (int l = 0; l < nl; l++) {
                feather_ctx *c = ctx_at(lv[l]);
                REQUIRE(c);
                memset(got, 0xaa, sizeof got);
                CHECK(feather_fp8_cast(c, dt, src, 65536, inv, (feather_fp8)f, got) == FEATHER_OK);
                int bad = 0;
                for (int i = 0; i < 65536; i++) {
                    if (got[i] != want[i] && bad++ < 3)
                        test_fail(__FILE__, __LINE__, "%s %s→%s inv=%g: 0x%04x → 0x%02x, want 0x%02x",
                                  feather_simd_name(lv[l]), feather_dtype_name(dt),
                                  feather_fp8_name((feather_fp8)f), (double)inv, i, got[i], want[i]);
                }
                feather_ctx_free(c);
                /* the 4-row kernels: the patterns as 4 rows of 16,384, plain and packed */
                static _Alignas(64) uint8_t tiled[65536];
                for (int unit = 0; unit < 2; unit++) {
                    if (unit && inv != 1.0f) continue;
                    feather_tile_fn t = feather_tile_kernel(lv[l], dt, (feather_fp8)f, unit);
                    const float inv4[4] = {inv, inv, inv, inv};
                    for (int packed = 0; packed < 2; packed++) {
                        memset(tiled, 0xaa, sizeof tiled);
                        t(src, 16384, 16384, inv4, tiled, packed ? 64 : 16384, packed, packed);
                        feather_stream_fence();
                        int bad = 0;
                        for (int i = 0; i < 65536 && bad < 3; i++) {
                            int r = i / 16384, c = i % 16384;
                            uint8_t g = tiled[packed ? (c / 16) * 64 + 16 * r + c % 16 : i];
                            if (g != want[i] && bad++ < 3)
                                test_fail(__FILE__, __LINE__, "%s tile unit %d packed %d %s→%s inv=%g: 0x%04x → 0x%02x, want 0x%02x",
                                          feather_simd_name(lv[l]), unit, packed, feather_dtype_name(dt),
                                          feather_fp8_name((feather_fp8)f), (double)inv, i, g, want[i]);
                        }
                    }
                }
            }
            /* the scalar per-element functions too (inv = 1 only: that is what they do) */
            if (inv == 1.0f) {
                for (int i = 0; i < 65536; i++) {
                    uint8_t s = dt == FEATHER_F16 ? (f ? feather_f16_to_e4m3fn((uint16_t)i) : feather_f16_to_e5m2((uint16_t)i))
                                                  : (f ? feather_bf16_to_e4m3fn((uint16_t)i) : feather_bf16_to_e5m2((uint16_t)i));
                    if (s != want[i]) {
                        test_fail(__FILE__, __LINE__, "scalar %s→%s 0x%04x: 0x%02x want 0x%02x",
                                  feather_dtype_name(dt), feather_fp8_name((feather_fp8)f), i, s, want[i]);
                        break;
                    }
                }
            }
        }
    }
}

TEST(fp8_all_f16_patterns) { exhaustive16(FEATHER_F16); }
TEST(fp8_all_bf16_patterns) { exhaustive16(FEATHER_BF16); }

/* Brute force over a float buffer at every level and format. */
static void check_f32_buf(const float *x, size_t n, float inv, const char *what) {
    feather_simd lv[3];
    int nl = levels(lv);
    uint8_t *got = malloc(n), *want = malloc(n);
    REQUIRE(got && want);
    for (int f = 0; f < 2; f++) {
        for (size_t i = 0; i < n; i++) want[i] = ref_fp8(x[i] * inv, f);
        for (int l = 0; l < nl; l++) {
            feather_ctx *c = ctx_at(lv[l]);
            REQUIRE(c);
            CHECK(feather_fp8_cast(c, FEATHER_F32, x, n, inv, (feather_fp8)f, got) == FEATHER_OK);
            int bad = 0;
            for (size_t i = 0; i < n; i++)
                if (got[i] != want[i] && bad++ < 3)
                    test_fail(__FILE__, __LINE__, "%s %s f32→%s inv=%g: %a (0x%08x) → 0x%02x, want 0x%02x",
                              what, feather_simd_name(lv[l]), feather_fp8_name((feather_fp8)f), (double)inv,
                              (double)x[i], f32_bits(x[i]), got[i], want[i]);
            feather_ctx_free(c);
        }
    }
    free(got);
    free(want);
}

TEST(fp8_f32_edge_cases) {
    ref_init();
    size_t cap = 1 << 16, n = 0;
    float *x = malloc(cap * sizeof *x);
    REQUIRE(x);
#define ADD(v) do { float v_ = (v); x[n++] = v_; x[n++] = -v_; } while (0)
    for (int f = 0; f < 2; f++) {
        const fp8ref *r = &REF[f];
        for (int c = 0; c <= r->maxcode; c++) {
            float v = (float)r->val[c];
            ADD(v);
            ADD(nextafterf(v, 0));
            ADD(nextafterf(v, INFINITY));
            /* halfway points around every code: exact ties, and one f32 ulp either side */
            double hi = c < r->maxcode ? r->val[c + 1] : 2 * r->val[c] - r->val[c - 1];
            float mid = (float)((r->val[c] + hi) / 2);
            ADD(mid);
            ADD(nextafterf(mid, 0));
            ADD(nextafterf(mid, INFINITY));
        }
    }
    const float specials[] = {0.0f, 57344.0f, 61440.0f, 61439.99f, 61440.004f, 65504.0f, 65536.0f,
                              448.0f, 464.0f, 463.99997f, 464.00003f, 480.0f, 1e6f, 3.4028235e38f,
                              INFINITY, 0x1p-14f, 0x1p-15f, 0x1p-16f, 0x1p-17f, 0x1.8p-16f,
                              0x1p-6f, 0x1p-9f, 0x1p-10f, 0x1.8p-9f, 0x1p-126f, 0x1p-149f,
                              0x1.fffffcp-127f, 1.0f, 1.125f, 1.0625f};
    for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) {
        ADD(specials[i]);
        ADD(nextafterf(specials[i], 0));
        ADD(nextafterf(specials[i], INFINITY));
    }
    const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0x7fa00000u};
    for (size_t i = 0; i < 4; i++) ADD(bits_f32(nans[i]));
#undef ADD
    /* all f32 subnormal/normal exponent boundaries */
    for (int e = 0; e < 255; e++) {
        x[n++] = bits_f32((uint32_t)e << 23);
        x[n++] = bits_f32(((uint32_t)e << 23) | 0x7fffff);
    }
    for (size_t si = 0; si < sizeof INVS / sizeof *INVS; si++) check_f32_buf(x, n, INVS[si], "edge");
    /* NaN → +0, ±Inf → ±max, -0 → 0x80, explicitly */
    CHECK_EQ_U(feather_f32_to_e5m2(bits_f32(0xffc00000u)), 0x00);
    CHECK_EQ_U(feather_f32_to_e5m2(-INFINITY), 0xfb);
    CHECK_EQ_U(feather_f32_to_e4m3fn(INFINITY), 0x7e);
    CHECK_EQ_U(feather_f32_to_e4m3fn(-0.0f), 0x80);
    free(x);
}

TEST(fp8_f32_ten_million_random) {
    ref_init();
    const size_t chunk = 1 << 20;
    float *x = malloc(chunk * sizeof *x);
    REQUIRE(x);
    size_t total = 0;
    for (int round = 0; round < 10; round++) {
        for (size_t i = 0; i < chunk; i++) {
            uint64_t r = rnd();
            if (round % 2 == 0) {
                x[i] = bits_f32((uint32_t)r); /* any pattern: NaNs, Infs, subnormals included */
            } else {
                /* near the grid of either format: a code, a halfway point, or a few ulps off */
                const fp8ref *f = &REF[r & 1];
                int c = (int)((r >> 1) % (uint64_t)f->maxcode);
                double v = (r >> 9) & 1 ? (f->val[c] + f->val[c + 1]) / 2 : f->val[c];
                float fv = (float)v;
                int ulps = (int)((r >> 10) % 9) - 4;
                uint32_t b = f32_bits(fv) + (uint32_t)ulps;
                if (fv == 0.0f && ulps < 0) b = (uint32_t)(-ulps);
                x[i] = bits_f32(b | ((r >> 20) & 1 ? 0x80000000u : 0));
            }
        }
        check_f32_buf(x, chunk, 1.0f, round % 2 ? "near-grid" : "bits");
        total += chunk;
        if (test_failed_now()) break;
    }
    CHECK(total >= 10000000);
    free(x);
}

/* Rounding f32 → fp16 → e5m2 rounds twice and differs from direct RNE for some inputs; the
 * codec rounds once. */
TEST(fp8_no_double_rounding_via_f16) {
    ref_init();
    int found = 0;
    float witness = 0;
    for (int c = 0; c < REF[0].maxcode && found < 10; c++) {
        float mid = (float)((REF[0].val[c] + REF[0].val[c + 1]) / 2);
        float x = nextafterf(mid, INFINITY); /* above the tie by less than half an fp16 ulp */
        uint8_t twice = feather_f16_to_e5m2(feather_f32_to_f16(x));
        uint8_t direct = ref_fp8(x, 0);
        if (twice != direct) {
            if (!found) witness = x;
            found++;
            CHECK_EQ_U(feather_f32_to_e5m2(x), direct);
        }
    }
    REQUIRE(found > 0);
    float xs[64];
    for (int i = 0; i < 64; i++) xs[i] = i % 2 ? -witness : witness;
    check_f32_buf(xs, 64, 1.0f, "double-rounding witness");
}

TEST(fp8_decoders_all_codes) {
    ref_init();
    for (int q = 0; q < 256; q++) {
        double s = q & 0x80 ? -1 : 1;
        int c = q & 0x7f;
        /* e5m2: 0x7c = Inf, 0x7d-0x7f NaN */
        float d = feather_e5m2_to_f32((uint8_t)q);
        if (c == 0x7c) CHECK(isinf(d) && (d < 0) == (s < 0));
        else if (c > 0x7c) CHECK(isnan(d));
        else {
            double want = s * REF[0].val[c];
            CHECK((double)d == want && !signbit(d) == !signbit(s));
        }
        float e = feather_e4m3fn_to_f32((uint8_t)q);
        if (c == 0x7f) CHECK(isnan(e));
        else CHECK((double)e == s * REF[1].val[c] && !signbit(e) == !signbit(s));
        CHECK((double)feather_fp8_to_f32((uint8_t)q, FEATHER_FP8_E4M3FN) == (double)e || isnan(e));
        /* decode then encode is the identity on finite codes */
        if (c <= 0x7b) CHECK_EQ_U(feather_f32_to_e5m2(d), q);
        if (c <= 0x7e) CHECK_EQ_U(feather_f32_to_e4m3fn(e), q);
    }
    uint8_t q[256];
    float out[256];
    for (int i = 0; i < 256; i++) q[i] = (uint8_t)i;
    feather_fp8_decode(q, 256, 0.5f, FEATHER_FP8_E5M2, out);
    for (int i = 0; i < 0x7c; i++) CHECK(out[i] == (float)(REF[0].val[i] * 0.5));
}

/* The decoding kernels of every level give the scalar kernel's bits (f32(q) · s, one rounding):
 * every code of both formats, Inf and NaN among them, at scales that round, overflow to Inf and
 * reach f32's subnormals, for every length up to 40 from every start within 8 bytes. */
TEST(fp8_decode_kernels_agree) {
    feather_simd lv[3];
    const int nl = levels(lv);
    uint8_t q[256 + 48];
    for (int i = 0; i < 256 + 48; i++) q[i] = (uint8_t)(i * 73 + 11);
    static const float scales[] = {1.0f, 0.3f, 1e-3f, 3e36f, 1e-40f, 7.5e-39f};
    float want[64], got[64];
    for (int f = 0; f < 2; f++) {
        const feather_fp8 fmt = (feather_fp8)f;
        for (int l = 1; l < nl; l++) {
            const feather_decode_fn d = feather_decode_kernel(lv[l]);
            for (size_t si = 0; si < sizeof scales / sizeof scales[0]; si++) {
                unsigned bad = 0;
                /* all 256 codes, 32 at a time */
                for (int at = 0; at < 256; at += 32) {
                    uint8_t all[32];
                    for (int i = 0; i < 32; i++) all[i] = (uint8_t)(at + i);
                    feather_fp8_decode_scalar(all, 32, scales[si], fmt, want);
                    d(all, 32, scales[si], fmt, got);
                    bad += memcmp(want, got, 32 * sizeof(float)) != 0;
                }
                for (size_t off = 0; off < 8; off++)
                    for (size_t n = 0; n <= 40; n++) {
                        feather_fp8_decode_scalar(q + off, n, scales[si], fmt, want);
                        d(q + off, n, scales[si], fmt, got);
                        bad += memcmp(want, got, n * sizeof(float)) != 0;
                    }
                if (bad) test_fail(__FILE__, __LINE__, "%s, level %d, scale %g: %u runs differ", f ? "e4m3fn" : "e5m2",
                                   (int)lv[l], (double)scales[si], bad);
            }
        }
        /* the scalar kernel is the definition */
        for (int c = 0; c < 256; c++) {
            const uint8_t b = (uint8_t)c;
            feather_fp8_decode_scalar(&b, 1, 0.3f, fmt, want);
            const float ref = feather_fp8_to_f32(b, fmt) * 0.3f;
            CHECK(memcmp(want, &ref, 4) == 0);
        }
    }
}

TEST(fp8_count_nonfinite) {
    static uint16_t h[65537];
    for (int i = 0; i < 65536; i++) h[i + 1] = (uint16_t)i;
    uint64_t want16 = 0, wantbf = 0;
    for (int i = 0; i < 65536; i++) {
        want16 += !isfinite(f16_value((uint16_t)i));
        wantbf += !isfinite(bf16_value((uint16_t)i));
    }
    CHECK_EQ_U(want16, 2 * 1024);
    CHECK_EQ_U(feather_count_nonfinite(FEATHER_F16, h + 1, 65536), want16);
    CHECK_EQ_U(feather_count_nonfinite(FEATHER_BF16, h + 1, 65536), wantbf);
    /* unaligned start */
    unsigned char *raw = (unsigned char *)malloc(65536 * 2 + 1);
    REQUIRE(raw);
    memcpy(raw + 1, h + 1, 65536 * 2);
    CHECK_EQ_U(feather_count_nonfinite(FEATHER_F16, raw + 1, 65536), want16);
    free(raw);
    float f[7] = {1.0f, INFINITY, -INFINITY, NAN, 3.4028235e38f, 0x1p-149f, -0.0f};
    CHECK_EQ_U(feather_count_nonfinite(FEATHER_F32, f, 7), 3);
    CHECK_EQ_U(feather_count_nonfinite(FEATHER_F32, f, 1), 0);
    CHECK_EQ_U(feather_count_nonfinite(FEATHER_F8_E5M2, f, 7), 0);
    /* f32 goes sixteen at a time, then one by one: every length, from an unaligned start */
    unsigned char fb[4 * 100 + 1];
    for (int i = 0; i < 100; i++) {
        const float v = i % 7 == 3 ? f[1 + i % 3] : (float)i - 50.0f;
        memcpy(fb + 1 + 4 * i, &v, 4);
    }
    for (size_t n = 0, want = 0; n <= 100; want += n < 100 && n % 7 == 3, n++)
        CHECK_EQ_U(feather_count_nonfinite(FEATHER_F32, fb + 1, n), want);
}

/* Nearest value among the finite patterns of a 16-bit format (listed ascending), ties to the
 * even pattern; past max + half an ulp IEEE overflows to Inf. */
static uint16_t ref_round16(float x, const double *val, int nval, uint16_t inf) {
    if (isnan(x)) return 0xffff;
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    double ax = fabs((double)x);
    double top = val[nval - 1] + (val[nval - 1] - val[nval - 2]) / 2;
    if (ax >= top) return sign | inf;
    if (ax >= val[nval - 1]) return sign | (uint16_t)(nval - 1);
    int lo = 0, hi = nval - 1;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (val[mid] <= ax) lo = mid;
        else hi = mid;
    }
    double m = (val[lo] + val[hi]) / 2;
    int c = ax < m ? lo : ax > m ? hi : (lo % 2 == 0 ? lo : hi);
    return sign | (uint16_t)c;
}

TEST(fp8_f32_to_f16_bf16) {
    /* round trips over every pattern */
    for (int i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        uint16_t back = feather_f32_to_f16(feather_f16_to_f32(h));
        if ((h & 0x7fff) > 0x7c00) CHECK((back & 0x7fff) > 0x7c00 && (back & 0x8000) == (h & 0x8000));
        else if (back != h) { CHECK_EQ_U(back, h); break; }
        uint16_t bb = feather_f32_to_bf16(feather_bf16_to_f32(h));
        if ((h & 0x7fff) > 0x7f80) CHECK((bb & 0x7fff) > 0x7f80 && (bb & 0x8000) == (h & 0x8000));
        else if (bb != h) { CHECK_EQ_U(bb, h); break; }
        if ((double)feather_f16_to_f32(h) != f16_value(h) && !isnan(f16_value(h))) {
            CHECK(!"f16 decode");
            break;
        }
    }
    /* rounding of random f32 against a nearest-value search */
    static double v16[0x7c00], vbf[0x7f80];
    for (int i = 0; i < 0x7c00; i++) v16[i] = f16_value((uint16_t)i);
    for (int i = 0; i < 0x7f80; i++) vbf[i] = bf16_value((uint16_t)i);
    int bad = 0;
    for (int i = 0; i < 1000000 && bad < 3; i++) {
        uint64_t r = rnd();
        float x = bits_f32((uint32_t)r);
        if (i % 2) x = (float)(ldexp((double)(r >> 40), -24 - (int)((r >> 32) % 24)) * (r & 1 ? -1 : 1));
        uint16_t want = ref_round16(x, v16, 0x7c00, 0x7c00), got = feather_f32_to_f16(x);
        if (isnan(x) ? (got & 0x7fff) <= 0x7c00 : got != want) {
            bad++;
            test_fail(__FILE__, __LINE__, "f32→f16 %a: 0x%04x want 0x%04x", (double)x, got, want);
        }
        want = ref_round16(x, vbf, 0x7f80, 0x7f80), got = feather_f32_to_bf16(x);
        if (isnan(x) ? (got & 0x7fff) <= 0x7f80 : got != want) {
            bad++;
            test_fail(__FILE__, __LINE__, "f32→bf16 %a: 0x%04x want 0x%04x", (double)x, got, want);
        }
    }
}

/* Bulk cast and the strided kernels: every n (tails), unaligned pointers, every level. */
TEST(fp8_bulk_tails_unaligned_strided) {
    ref_init();
    enum { MAXN = 300 };
    unsigned char srcbuf[MAXN * 4 + 8], got[MAXN + 8], want[MAXN + 8];
    static uint8_t strided[64 * 20 + 64];
    feather_simd lv[3];
    int nl = levels(lv);
    const feather_dtype dts[3] = {FEATHER_F16, FEATHER_BF16, FEATHER_F32};
    for (int d = 0; d < 3; d++) {
        feather_dtype dt = dts[d];
        size_t esz = dt == FEATHER_F32 ? 4 : 2;
        /* mostly ordinary values, some NaN/Inf/huge; copied to each misalignment below */
        unsigned char vals[MAXN * 4];
        for (size_t i = 0; i < sizeof vals; i++) {
            vals[i] = (unsigned char)rnd();
            if (i % esz == esz - 1) vals[i] = (unsigned char)((vals[i] & 0x80) | (rnd() % 5 == 0 ? 0x7f : 0x3c + rnd() % 8));
            if (i % esz == esz - 2 && rnd() % 3 == 0) vals[i] |= 0x80;
        }
        for (int f = 0; f < 2; f++) {
            for (int si = 0; si < 3; si++) {
                float inv = INVS[si];
                for (size_t off = 0; off < 4; off++) {
                    memcpy(srcbuf + off, vals, sizeof vals);
                    const unsigned char *src = srcbuf + off;
                    feather_fp8_cast_scalar(dt, src, MAXN, inv, (feather_fp8)f, want);
                    uint64_t nbad_all = feather_count_nonfinite(dt, src, MAXN);
                    for (int l = 0; l < nl; l++) {
                        feather_ctx *c = ctx_at(lv[l]);
                        REQUIRE(c);
                        for (size_t n = 0; n <= MAXN; n += (n < 70 ? 1 : 37)) {
                            memset(got, 0xcc, sizeof got);
                            CHECK(feather_fp8_cast(c, dt, src, n, inv, (feather_fp8)f, got + off) == FEATHER_OK);
                            if (memcmp(got + off, want, n) || got[off + n] != 0xcc || (off && got[off - 1] != 0xcc)) {
                                test_fail(__FILE__, __LINE__, "%s %s→%s n=%zu off=%zu inv=%g differs or overruns",
                                          feather_simd_name(lv[l]), feather_dtype_name(dt),
                                          feather_fp8_name((feather_fp8)f), n, off, (double)inv);
                                break;
                            }
                        }
                        /* strided pieces (the packed layout's access) and the non-finite flag */
                        for (int unit = 0; unit < 2; unit++) {
                            if (unit && inv != 1.0f) continue;
                            feather_cast_fn k = feather_cast_kernel(lv[l], dt, (feather_fp8)f, unit);
                            size_t n = 16 * 18, stride = 64 + off;
                            memset(strided, 0, sizeof strided);
                            int flag = k(src, n, inv, strided + off, stride);
                            CHECK_EQ_U(flag != 0, feather_count_nonfinite(dt, src, n) != 0);
                            for (size_t p = 0; p < n / 16; p++)
                                if (memcmp(strided + off + p * stride, want + 16 * p, 16)) {
                                    test_fail(__FILE__, __LINE__, "%s strided piece %zu differs",
                                              feather_simd_name(lv[l]), p);
                                    break;
                                }
                            /* a run without NaN/Inf reports none */
                            size_t clean = 0;
                            while (clean < MAXN && feather_count_nonfinite(dt, src + clean * esz, 1) == 0) clean++;
                            uint8_t tmp[MAXN];
                            CHECK_EQ_U(k(src, clean, inv, tmp, 16), 0);
                        }
                        feather_ctx_free(c);
                    }
                    CHECK(nbad_all > 0);
                }
            }
        }
    }
}

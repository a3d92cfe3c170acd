/* Scale search: option parsing, the grid, the f32-domain rounding, agreement of the SIMD
 * levels and thread counts, the histogram objective against a direct evaluation, the
 * absmax candidate, importance weights, all-zero groups, and real tensors. */
#include "test.h"
#include "feather/feather.h"
#include "scale_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- helpers ---- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static void rng_seed(uint64_t s) { rng_state = s * 0x9e3779b97f4a7c15ull + 1; }
static uint64_t rng_u64(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}
static double rng_unit(void) { return ((rng_u64() >> 11) + 0.5) / 9007199254740992.0; }
static double rng_normal(void) {
    return sqrt(-2 * log(rng_unit())) * cos(6.283185307179586 * rng_unit());
}
static double rng_student3(void) {
    double z = rng_normal(), c = 0;
    for (int i = 0; i < 3; i++) {
        double g = rng_normal();
        c += g * g;
    }
    return z / sqrt(c / 3);
}

/* D_WIDE: log-uniform magnitudes over 36 octaves, so that scaled values reach the fp8
 * subnormals (and fp16 ones) */
enum { D_NORMAL, D_STUDENT, D_ROWSPREAD, D_OUTLIERS, D_TINY, D_WIDE, D_KINDS };

/* An (n, k) tensor of the given dtype and distribution. */
static void *gen(feather_dtype dt, uint64_t n, uint64_t k, int kind, uint64_t seed) {
    rng_seed(seed);
    size_t es = dt == FEATHER_F32 ? 4 : 2;
    uint8_t *p = malloc((size_t)(n * k) * es + 1);
    for (uint64_t r = 0; r < n; r++) {
        double rs = kind == D_ROWSPREAD ? exp(rng_normal()) : 1;
        for (uint64_t c = 0; c < k; c++) {
            double v = kind == D_STUDENT ? rng_student3() : rng_normal();
            v *= 0.02 * rs;
            if (kind == D_OUTLIERS && c % 61 == 3) v *= 30;
            if (kind == D_TINY) v *= 1e-4;
            if (kind == D_WIDE) v = (v < 0 ? -1 : 1) * ldexp(1.0, -(int)(rng_u64() % 36)) * (1 + rng_unit());
            size_t i = (size_t)(r * k + c);
            if (dt == FEATHER_F16) ((uint16_t *)p)[i] = feather_f32_to_f16((float)v);
            else if (dt == FEATHER_BF16) ((uint16_t *)p)[i] = feather_f32_to_bf16((float)v);
            else ((float *)p)[i] = (float)v;
        }
    }
    return p;
}

static float get_f32(feather_dtype dt, const void *p, size_t i) {
    if (dt == FEATHER_F16) return feather_f16_to_f32(((const uint16_t *)p)[i]);
    if (dt == FEATHER_BF16) return feather_bf16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* The objective of one group written straight from the definition in quant.h, independently
 * of the kernels: signed weights, the codec's own cast and decode, 16 lane sums, the tree. */
static float spec_group(feather_dtype dt, const void *w, size_t start, size_t len,
                        const float *imp, float s, feather_fp8 fmt) {
    float inv = 1.0f / s, l[16] = {0};
    for (size_t i = 0; i < len; i++) {
        float x = get_f32(dt, w, start + i);
        if (!isfinite(x)) x = 0;
        float q = feather_fp8_to_f32(feather_f32_to_fp8(x * inv, fmt), fmt);
        float p = s * q;
        float d = x - p;
        float e = d * d;
        if (imp) e = e * imp[i];
        l[i % 16] = l[i % 16] + e;
    }
    float a[8], b[4];
    for (int i = 0; i < 8; i++) a[i] = l[i] + l[i + 8];
    for (int i = 0; i < 4; i++) b[i] = a[i] + a[i + 4];
    return (b[0] + b[2]) + (b[1] + b[3]);
}

/* Σ imp·(w − s·q)² in double, element order (a direct evaluation). */
static double direct_err(feather_dtype dt, const void *w, uint64_t n, uint64_t k, const float *imp,
                         float s, feather_fp8 fmt) {
    float inv = 1.0f / s;
    double t = 0;
    for (uint64_t r = 0; r < n; r++)
        for (uint64_t c = 0; c < k; c++) {
            float x = get_f32(dt, w, (size_t)(r * k + c));
            if (!isfinite(x)) continue;
            float q = feather_fp8_to_f32(feather_f32_to_fp8(x * inv, fmt), fmt);
            double d = (double)x - (double)s * (double)q;
            t += (imp ? (double)imp[c] : 1.0) * d * d;
        }
    return t;
}

static float group_amax(feather_dtype dt, const void *w, size_t start, size_t len) {
    float m = 0;
    for (size_t i = 0; i < len; i++) {
        float x = fabsf(get_f32(dt, w, start + i));
        if (isfinite(x) && x > m) m = x;
    }
    return m;
}

/* Is s one of the candidates s_absmax·r_j of a group with maximum amax (or 1 when amax = 0)? */
static int is_candidate(float s, float amax, feather_fp8 fmt, unsigned grid) {
    if (amax == 0) return s == 1.0f;
    float r[FEATHER_GRID_MAX], sa = amax / feather_fp8_max(fmt);
    feather_grid_ratios(grid, r);
    for (unsigned j = 0; j < grid; j++)
        if (s == sa * r[j]) return 1;
    return 0;
}

/* Checks the scales of one search against the definition: every scale is a candidate, and for
 * channel/block groups its objective (recomputed from the definition) is at most that of the
 * absmax candidate; for tensor mode the direct error is at most that of absmax (to rounding). */
static void check_never_worse(const char *what, const feather_quant_options *o, feather_dtype dt,
                              const void *w, uint64_t n, uint64_t k, const float *sc) {
    unsigned grid = feather_grid_size(o->grid);
    if (o->mode == FEATHER_SCALE_TENSOR) {
        float amax = group_amax(dt, w, 0, (size_t)(n * k));
        if (!is_candidate(sc[0], amax, o->format, grid))
            test_fail(__FILE__, __LINE__, "%s: tensor scale %g is not a candidate", what, sc[0]);
        if (amax == 0) return;
        float sa = amax / feather_fp8_max(o->format);
        double e = direct_err(dt, w, n, k, o->importance, sc[0], o->format);
        double e0 = direct_err(dt, w, n, k, o->importance, sa, o->format);
        /* 16-bit weights: exact histogram sums; f32: row sums in f32 (quant.h) */
        double tol = dt == FEATHER_F32 ? 1e-5 : 1e-9;
        if (!(e <= e0 * (1 + tol)))
            test_fail(__FILE__, __LINE__, "%s: tensor search error %.9g > absmax %.9g", what, e, e0);
        return;
    }
    uint64_t g = o->mode == FEATHER_SCALE_BLOCK ? o->group : k, ng = k / g;
    int bad = 0;
    for (uint64_t r = 0; r < n && bad < 3; r++)
        for (uint64_t b = 0; b < ng && bad < 3; b++) {
            size_t start = (size_t)(r * k + b * g);
            float s = sc[r * ng + b], amax = group_amax(dt, w, start, (size_t)g);
            if (!is_candidate(s, amax, o->format, grid)) {
                test_fail(__FILE__, __LINE__, "%s: group (%llu,%llu) scale %g not a candidate",
                          what, (unsigned long long)r, (unsigned long long)b, s);
                bad++;
                continue;
            }
            if (amax == 0) continue;
            const float *imp = o->importance ? o->importance + b * g : NULL;
            float sa = amax / feather_fp8_max(o->format);
            float e = spec_group(dt, w, start, (size_t)g, imp, s, o->format);
            float e0 = spec_group(dt, w, start, (size_t)g, imp, sa, o->format);
            if (!(e <= e0)) {
                test_fail(__FILE__, __LINE__, "%s: group (%llu,%llu) objective %.9g > absmax %.9g",
                          what, (unsigned long long)r, (unsigned long long)b, e, e0);
                bad++;
            }
        }
}

/* Channel/block: every scale equals the first argmin, over the grid, of the objective
 * recomputed from the definition (spec_group). */
static void check_exact(const char *what, const feather_quant_options *o, feather_dtype dt,
                        const void *w, uint64_t n, uint64_t k, const float *sc) {
    unsigned grid = feather_grid_size(o->grid);
    float r[FEATHER_GRID_MAX];
    feather_grid_ratios(grid, r);
    uint64_t g = o->mode == FEATHER_SCALE_BLOCK ? o->group : k, ng = k / g;
    int bad = 0;
    for (uint64_t row = 0; row < n && bad < 3; row++)
        for (uint64_t b = 0; b < ng && bad < 3; b++) {
            size_t start = (size_t)(row * k + b * g);
            float amax = group_amax(dt, w, start, (size_t)g), want = 1.0f;
            if (amax > 0) {
                float sa = amax / feather_fp8_max(o->format), best = 0;
                for (unsigned j = 0; j < grid; j++) {
                    float e = spec_group(dt, w, start, (size_t)g,
                                         o->importance ? o->importance + b * g : NULL, sa * r[j],
                                         o->format);
                    if (j == 0 || e < best) {
                        best = e;
                        want = sa * r[j];
                    }
                }
            }
            if (sc[row * ng + b] != want) {
                test_fail(__FILE__, __LINE__, "%s: group (%llu,%llu) scale %.9g, definition %.9g",
                          what, (unsigned long long)row, (unsigned long long)b,
                          sc[row * ng + b], want);
                bad++;
            }
        }
}

static feather_quant_options opts_of(feather_fp8 fmt, feather_scale_mode m, unsigned g) {
    feather_quant_options o;
    memset(&o, 0, sizeof o);
    o.format = fmt;
    o.mode = m;
    o.group = g;
    return o;
}

static const feather_scale_mode all_modes[] = {FEATHER_SCALE_ABSMAX, FEATHER_SCALE_TENSOR,
                                               FEATHER_SCALE_CHANNEL, FEATHER_SCALE_BLOCK};
static const feather_dtype all_dtypes[] = {FEATHER_F16, FEATHER_BF16, FEATHER_F32};

/* ---------------------------------------------------------------- parse / grid ---- */

TEST(scale_parse_format_roundtrip) {
    const char *ok[] = {"none", "absmax", "tensor", "channel", "block:16", "block:128", "block:4096"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        feather_scale_mode m;
        unsigned g = 99;
        feather_error e;
        CHECK(feather_scale_parse(ok[i], &m, &g, &e) == FEATHER_OK);
        char buf[32];
        CHECK(!strcmp(feather_scale_format(m, g, buf, sizeof buf), ok[i]));
        if (m != FEATHER_SCALE_BLOCK) CHECK_EQ_U(g, 0);
    }
}

TEST(scale_parse_rejects) {
    const char *bad[] = {"", "Block:16", "block", "block:", "block:0", "block:8", "block:24",
                         "block:16x", "block:-16", "block:+16", "tensor ", "per-channel",
                         "block:99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        feather_scale_mode m = FEATHER_SCALE_TENSOR;
        unsigned g = 7;
        feather_error e;
        memset(&e, 0, sizeof e);
        CHECK(feather_scale_parse(bad[i], &m, &g, &e) == FEATHER_E_ARG);
        CHECK(m == FEATHER_SCALE_TENSOR && g == 7); /* outputs untouched on error */
        CHECK(strchr(e.message, '\n') == NULL);
        CHECK_STR_CONTAINS(e.message, "none, absmax, tensor, channel or block:G");
        if (!strcmp(bad[i], "block:0") || !strcmp(bad[i], "block:8") || !strcmp(bad[i], "block:24"))
            CHECK_STR_CONTAINS(e.message, "block size not a multiple of 16");
    }
    feather_error e;
    CHECK(feather_scale_parse(NULL, NULL, NULL, &e) == FEATHER_E_ARG);
}

TEST(scale_grid_ratios) {
    CHECK_EQ_U(feather_grid_size(0), FEATHER_GRID_DEFAULT_SIZE);
    CHECK_EQ_U(feather_grid_size(1), 1);
    CHECK_EQ_U(feather_grid_size(37), 37);
    CHECK_EQ_U(feather_grid_size(100000), FEATHER_GRID_MAX);
    for (unsigned n = 1; n <= FEATHER_GRID_MAX; n++) {
        float r[FEATHER_GRID_MAX];
        feather_grid_ratios(n, r);
        CHECK(r[0] == 1.0f);
        for (unsigned j = 1; j < n; j++) {
            CHECK(r[j] > r[j - 1]);
            CHECK(r[j] < 2.0f);
            /* evenly spaced: within a rounding of j/n */
            CHECK(fabs(r[j] - 1 - (double)j / n) < 1e-6);
        }
    }
}

TEST(scale_count_shapes) {
    feather_quant_options o = opts_of(FEATHER_FP8_E5M2, FEATHER_SCALE_TENSOR, 0);
    CHECK_EQ_U(feather_scale_count(&o, 10, 20), 1);
    o.mode = FEATHER_SCALE_NONE;
    CHECK_EQ_U(feather_scale_count(&o, 10, 20), 1);
    o.mode = FEATHER_SCALE_CHANNEL;
    CHECK_EQ_U(feather_scale_count(&o, 10, 20), 10);
    o.mode = FEATHER_SCALE_BLOCK;
    o.group = 32;
    CHECK_EQ_U(feather_scale_count(&o, 10, 128), 40);
    CHECK_EQ_U(feather_scale_count(&o, 10, 48), 0);
    o.group = 24;
    CHECK_EQ_U(feather_scale_count(&o, 10, 48), 0);
    o.group = 0;
    CHECK_EQ_U(feather_scale_count(&o, 10, 48), 0);
    CHECK_EQ_U(feather_scale_count(NULL, 10, 48), 0);
}

TEST(scale_block_group_validation) {
    uint16_t w[4 * 96];
    for (int i = 0; i < 4 * 96; i++) w[i] = feather_f32_to_f16((float)(i % 7) - 3);
    float sc[64];
    feather_error e;
    unsigned bad[] = {0, 8, 24, 40, 64 /* does not divide 96 */, 192 /* longer than a row */};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        feather_quant_options o = opts_of(FEATHER_FP8_E5M2, FEATHER_SCALE_BLOCK, bad[i]);
        o.name = "blk.weight";
        memset(&e, 0, sizeof e);
        CHECK(feather_scale_search(NULL, &o, FEATHER_F16, w, 4, 96, sc, &e) == FEATHER_E_ARG);
        CHECK_STR_CONTAINS(e.message, "blk.weight");
    }
    feather_quant_options o = opts_of(FEATHER_FP8_E5M2, FEATHER_SCALE_BLOCK, 32);
    CHECK(feather_scale_search(NULL, &o, FEATHER_F16, w, 4, 96, sc, &e) == FEATHER_OK);
    o.grid = FEATHER_GRID_MAX + 1;
    CHECK(feather_scale_search(NULL, &o, FEATHER_F16, w, 4, 96, sc, &e) == FEATHER_E_ARG);
    o.grid = 0;
    CHECK(feather_scale_search(NULL, &o, FEATHER_F8_E5M2, w, 4, 96, sc, &e) == FEATHER_E_ARG);
    float imp[96];
    for (int i = 0; i < 96; i++) imp[i] = 1;
    imp[5] = -1;
    o.importance = imp;
    CHECK(feather_scale_search(NULL, &o, FEATHER_F16, w, 4, 96, sc, &e) == FEATHER_E_ARG);
    imp[5] = NAN;
    CHECK(feather_scale_search(NULL, &o, FEATHER_F16, w, 4, 96, sc, &e) == FEATHER_E_ARG);
}

/* ---------------------------------------------------------------- rounding ---- */

static int round_matches(float x, feather_fp8 fmt) {
    scale_fmt f = scale_fmt_of(fmt);
    float a = feather_scale_round(x, f);
    float b = feather_fp8_to_f32(feather_f32_to_fp8(x, fmt), fmt);
    return memcmp(&a, &b, 4) == 0;
}

/* The f32-domain rounding equals decode(encode(x)) over its domain 0 <= x < 2^20 (candidate
 * ratios in [1/4, 4) keep w·inv below 4·fp8_max). Every 61st pattern, plus a neighbourhood of
 * every fp8 value and midpoint (where rounding changes), is checked. */
TEST(scale_round_equals_codec) {
    for (int fi = 0; fi < 2; fi++) {
        feather_fp8 fmt = fi ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2;
        uint64_t bad = 0;
        for (uint32_t u = 0; u < 0x49800000u; u += 61) {
            float x;
            memcpy(&x, &u, 4);
            bad += !round_matches(x, fmt);
        }
        for (int c = 0; c < 128; c++) {
            float v = feather_fp8_to_f32((uint8_t)c, fmt), nx = feather_fp8_to_f32((uint8_t)(c + 1), fmt);
            if (!isfinite(v)) continue;
            float pts[3] = {v, isfinite(nx) ? (v + nx) / 2 : v * 1.0625f, v * 2};
            for (int p = 0; p < 3; p++) {
                uint32_t u;
                memcpy(&u, &pts[p], 4);
                for (int d = -40; d <= 40; d++) {
                    uint32_t w = u + (uint32_t)d;
                    if (w >= 0x49800000u) continue;
                    float x;
                    memcpy(&x, &w, 4);
                    bad += !round_matches(x, fmt);
                }
            }
        }
        CHECK_EQ_U(bad, 0);
    }
}

/* ---------------------------------------------------------------- SIMD / threads ---- */

static int simd_levels(feather_simd *lv) {
    int n = 0;
    for (int s = FEATHER_SIMD_SCALAR; s <= FEATHER_SIMD_AVX512; s++)
        if ((feather_simd)s <= feather_simd_cpu()) lv[n++] = (feather_simd)s;
    return n;
}

static int kind_of(size_t i) { return (int)(i % D_KINDS); }

TEST(scale_kernels_identical_across_simd) {
    feather_simd lv[3];
    int nl = simd_levels(lv);
    if (nl < 2) test_skip("this CPU has no SIMD level beyond scalar; only scalar checked");
    scale_kernels ref = feather_scale_kernels(FEATHER_SIMD_SCALAR);
    size_t lens[] = {1, 7, 8, 15, 16, 17, 31, 48, 100, 128, 1000};
    for (int li = 1; li < nl; li++) {
        scale_kernels kn = feather_scale_kernels(lv[li]);
        for (int di = 0; di < 3; di++)
            for (size_t qi = 0; qi < sizeof lens / sizeof *lens; qi++) {
                feather_dtype dt = all_dtypes[di];
                size_t len = lens[qi], pad = (len + 15) & ~(size_t)15;
                void *w = gen(dt, 1, len, kind_of(qi), 1000 + qi);
                if (len > 5) { /* some non-finite values */
                    if (dt == FEATHER_F32) ((float *)w)[3] = INFINITY, ((float *)w)[5] = NAN;
                    else ((uint16_t *)w)[3] = dt == FEATHER_F16 ? 0xfc00 : 0xff80,
                         ((uint16_t *)w)[5] = 0x7fff;
                }
                float a1[1024], a2[1024], m1, m2, n1, n2;
                uint64_t nf1 = 0, nf2 = 0;
                memset(a1, 0x55, sizeof a1);
                memset(a2, 0x55, sizeof a2);
                ref.prep(dt, w, len, a1, &m1, &n1, &nf1);
                kn.prep(dt, w, len, a2, &m2, &n2, &nf2);
                CHECK(!memcmp(a1, a2, pad * 4) && m1 == m2 && n1 == n2 && nf1 == nf2);
                CHECK(a1[pad] != 0 && a2[pad] != 0); /* nothing written past the padding */
                for (int fi = 0; fi < 2; fi++) {
                    feather_fp8 fmt = fi ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2;
                    scale_fmt f = scale_fmt_of(fmt);
                    for (unsigned nr = 1; nr <= 37; nr += 6)
                        for (int ri = 0; ri < 2; ri++) {
                            /* ratios in [1/4, 4) (every clamp needed) or the grid's [1, 2) */
                            float r[64], s1[64], i1[64], s2[64], i2[64], acc1[64 * 16],
                                acc2[64 * 16], t1[64], t2[64], t3[64], imp[1024];
                            if (ri) feather_grid_ratios(nr, r);
                            else
                                for (unsigned j = 0; j < nr; j++)
                                    r[j] = 0.25f + 3.7f * (float)j / (float)nr;
                            for (size_t i = 0; i < pad; i++) imp[i] = (float)rng_unit() * 3;
                            float sa = m1 > 0 ? m1 / f.max : 1;
                            ref.cands(sa, r, nr, s1, i1);
                            kn.cands(sa, r, nr, s2, i2);
                            CHECK(!memcmp(s1, s2, nr * 4) && !memcmp(i1, i2, nr * 4));
                            float ilo = i1[0], ihi = i1[0];
                            for (unsigned j = 1; j < nr; j++) {
                                ilo = i1[j] < ilo ? i1[j] : ilo;
                                ihi = i1[j] > ihi ? i1[j] : ihi;
                            }
                            int clamps = scale_clamps(m1, n1, ilo, ihi, f);
                            if (ri && len >= 100 && fi == 0 && kind_of(qi) != D_WIDE)
                                if (clamps) test_fail(__FILE__, __LINE__, "clamps %d dt %d len %zu kind %d amax %g amin %g ilo %g ihi %g", clamps, di, len, kind_of(qi), m1, n1, ilo, ihi); /* the fast path is the usual one */
                            for (int wi = 0; wi < 2; wi++)
                                for (int ci = 0; ci < 2; ci++) {
                                    int cl = ci ? 3 : clamps;
                                    memset(acc1, 0, sizeof acc1);
                                    memset(acc2, 0, sizeof acc2);
                                    /* two calls: accumulation across chunks, totals at the end */
                                    size_t half = (pad / 2) & ~(size_t)15;
                                    const float *im = wi ? imp : NULL, *im2 = wi ? imp + half : NULL;
                                    ref.errors(a1, im, half, s1, i1, nr, f, 3, acc1, NULL);
                                    kn.errors(a1, im, half, s1, i1, nr, f, cl, acc2, NULL);
                                    ref.errors(a1 + half, im2, pad - half, s1, i1, nr, f, 3, acc1, t1);
                                    kn.errors(a1 + half, im2, pad - half, s1, i1, nr, f, cl, acc2, t2);
                                    CHECK(!memcmp(acc1, acc2, nr * 64));
                                    CHECK(!memcmp(t1, t2, nr * 4));
                                    /* one call from zero, nothing stored */
                                    kn.errors(a1, im, pad, s1, i1, nr, f, cl, NULL, t3);
                                    CHECK(!memcmp(t1, t3, nr * 4));
                                }
                        }
                }
                free(w);
            }
    }
}

/* The histogram objective kernel gives the same doubles at every level. */
TEST(scale_hist_kernel_identical_across_simd) {
    feather_simd lv[3];
    int nl = simd_levels(lv);
    if (nl < 2) test_skip("this CPU has no SIMD level beyond scalar; only scalar checked");
    scale_kernels ref = feather_scale_kernels(FEATHER_SIMD_SCALAR);
    enum { NB = 3000 };
    static float vals[NB];
    static double wt[NB];
    rng_seed(4242);
    for (int i = 0; i < NB; i++) {
        vals[i] = (float)ldexp(1 + rng_unit(), -(int)(rng_u64() % 40)); /* reaches subnormals */
        wt[i] = 1 + rng_unit() * 1e6; /* all 53 bits used: every rounding shows */
    }
    float amax = 0;
    for (int i = 0; i < NB; i++) amax = vals[i] > amax ? vals[i] : amax;
    for (int fi = 0; fi < 2; fi++) {
        scale_fmt f = scale_fmt_of(fi ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2);
        unsigned sizes[] = {1, 7, 8, 16, 23, 40};
        for (size_t zi = 0; zi < sizeof sizes / sizeof *sizes; zi++) {
            unsigned nr = sizes[zi];
            float r[64], s[64], inv[64];
            for (unsigned j = 0; j < nr; j++) r[j] = 0.3f + 3.5f * (float)j / (float)nr;
            ref.cands(amax / f.max, r, nr, s, inv);
            double o1[64], o2[64];
            ref.hist(vals, wt, NB, s, inv, nr, f, o1);
            for (int li = 1; li < nl; li++) {
                memset(o2, 0, sizeof o2);
                feather_scale_kernels(lv[li]).hist(vals, wt, NB, s, inv, nr, f, o2);
                if (memcmp(o1, o2, nr * sizeof(double)))
                    test_fail(__FILE__, __LINE__, "%s histogram objective differs (fmt %d, %u cands)",
                              feather_simd_name(lv[li]), fi, nr);
            }
        }
    }
}

/* Full searches: the same scales at every SIMD level and with 1, 2 or 4 threads. */
TEST(scale_search_independent_of_simd_and_threads) {
    feather_simd lv[3];
    int nl = simd_levels(lv);
    feather_ctx *ctx[3] = {feather_ctx_new(1), feather_ctx_new(2), feather_ctx_new(4)};
    REQUIRE(ctx[0] && ctx[1] && ctx[2]);
    const uint64_t n = 160, k = 512; /* big enough for the thread pool to split it */
    float imp[512];
    for (int i = 0; i < 512; i++) imp[i] = (float)(rng_unit() * 2);
    static const int kinds[] = {D_NORMAL, D_OUTLIERS, D_WIDE};
    for (int di = 0; di < 3; di++)
        for (int ki = 0; ki < 3; ki++) {
            int kind = kinds[ki];
            void *w = gen(all_dtypes[di], n, k, kind, 77 + (uint64_t)kind);
            for (int mi = 0; mi < 4; mi++)
                for (int fi = 0; fi < 2; fi++)
                    for (int wi = 0; wi < 2; wi++) {
                        feather_quant_options o =
                            opts_of(fi ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2, all_modes[mi], 64);
                        o.importance = wi ? imp : NULL;
                        uint64_t c = feather_scale_count(&o, n, k);
                        float ref[2048], got[2048];
                        REQUIRE(c <= 2048);
                        feather_ctx_set_simd(ctx[0], FEATHER_SIMD_SCALAR);
                        REQUIRE(feather_scale_search(ctx[0], &o, all_dtypes[di], w, n, k, ref,
                                                     NULL) == FEATHER_OK);
                        /* every level on one thread, every thread count at the widest level */
                        for (int li = 0; li < nl; li++)
                            for (int t = 0; t < 3; t++) {
                                if ((li == 0 && t == 0) || (t > 0 && li != nl - 1)) continue;
                                feather_ctx_set_simd(ctx[t], lv[li]);
                                memset(got, 0, sizeof got);
                                REQUIRE(feather_scale_search(ctx[t], &o, all_dtypes[di], w, n, k,
                                                             got, NULL) == FEATHER_OK);
                                if (memcmp(ref, got, c * 4))
                                    test_fail(__FILE__, __LINE__,
                                              "dtype %d kind %d mode %d fmt %d imp %d: %s with %d "
                                              "threads differs from scalar",
                                              di, kind, mi, fi, wi, feather_simd_name(lv[li]),
                                              feather_ctx_threads(ctx[t]));
                            }
                    }
            free(w);
        }
    for (int t = 0; t < 3; t++) feather_ctx_free(ctx[t]);
}

/* ---------------------------------------------------------------- objective ---- */

/* The histogram objective of tensor mode equals a direct evaluation over the elements. */
TEST(scale_histogram_objective_matches_direct) {
    for (int di = 0; di < 2; di++)
        for (int kind = 0; kind < D_KINDS; kind++)
            for (int wi = 0; wi < 2; wi++) {
                feather_dtype dt = all_dtypes[di];
                const uint64_t n = 37, k = 250;
                void *w = gen(dt, n, k, kind, 500 + (uint64_t)kind);
                float imp[250];
                /* multiples of 1/64 of the maximum are exact in the 2^24 fixed point */
                for (int i = 0; i < 250; i++) imp[i] = (float)(rng_u64() % 65) / 16.0f;
                for (int fi = 0; fi < 2; fi++) {
                    feather_fp8 fmt = fi ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2;
                    feather_quant_options o = opts_of(fmt, FEATHER_SCALE_TENSOR, 0);
                    o.importance = wi ? imp : NULL;
                    float r[FEATHER_GRID_MAX], sc;
                    double obj[FEATHER_GRID_MAX];
                    unsigned nr = 24;
                    for (unsigned j = 0; j < nr; j++) r[j] = 0.5f + 1.5f * (float)j / (float)nr;
                    r[0] = 1;
                    REQUIRE(feather_scale_search_ratios(NULL, &o, dt, w, n, k, r, nr, &sc, obj,
                                                        NULL) == FEATHER_OK);
                    float sa = group_amax(dt, w, 0, (size_t)(n * k)) / feather_fp8_max(fmt);
                    double mx = 0;
                    for (int i = 0; i < 250; i++) mx = imp[i] > mx ? imp[i] : mx;
                    double scale = wi ? 16777216.0 / mx : 1; /* the fixed point's unit */
                    unsigned best = 0;
                    for (unsigned j = 0; j < nr; j++) {
                        double d = direct_err(dt, w, n, k, o.importance, sa * r[j], fmt) * scale;
                        if (fabs(obj[j] - d) > 1e-9 * d + 1e-300)
                            test_fail(__FILE__, __LINE__, "dt %d kind %d imp %d fmt %d cand %u: "
                                      "histogram %.12g direct %.12g", di, kind, wi, fi, j, obj[j], d);
                        if (obj[j] < obj[best]) best = j;
                    }
                    CHECK(sc == sa * r[best]);
                }
                free(w);
            }
}

/* The searched scales are candidates and never worse than absmax on the objective, for many
 * random tensors, every mode and both formats. */
TEST(scale_never_worse_than_absmax_random) {
    for (int di = 0; di < 3; di++)
        for (int kind = 0; kind < D_KINDS; kind++) {
            uint64_t n = 8 + (uint64_t)kind * 5, k = 256;
            void *w = gen(all_dtypes[di], n, k, kind, 900 + (uint64_t)(di * 10 + kind));
            float imp[256];
            for (int i = 0; i < 256; i++) imp[i] = (float)(rng_unit() * rng_unit() * 4);
            for (int mi = 0; mi < 4; mi++)
                for (int fi = 0; fi < 2; fi++)
                    for (int wi = 0; wi < 2; wi++)
                        for (unsigned g = 16; g <= 256; g *= 4) {
                            if (all_modes[mi] != FEATHER_SCALE_BLOCK && g > 16) continue;
                            feather_quant_options o = opts_of(
                                fi ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2, all_modes[mi], g);
                            o.importance = wi ? imp : NULL;
                            o.grid = (unsigned)(kind * 7 % 40);
                            float sc[1024];
                            REQUIRE(feather_scale_search(NULL, &o, all_dtypes[di], w, n, k, sc,
                                                         NULL) == FEATHER_OK);
                            if (all_modes[mi] == FEATHER_SCALE_ABSMAX) {
                                float a = group_amax(all_dtypes[di], w, 0, (size_t)(n * k));
                                CHECK(sc[0] == a / feather_fp8_max(o.format));
                                continue;
                            }
                            char what[96];
                            snprintf(what, sizeof what, "dt %d kind %d mode %d fmt %d imp %d G %u",
                                     di, kind, mi, fi, wi, g);
                            check_never_worse(what, &o, all_dtypes[di], w, n, k, sc);
                            if (all_modes[mi] >= FEATHER_SCALE_CHANNEL)
                                check_exact(what, &o, all_dtypes[di], w, n, k, sc);
                        }
            free(w);
        }
}

/* Importance weights decide between two candidates: element 1 is exact at r = 1 and element 2
 * at r = 1.25 (and nowhere earlier), so weighting one or the other picks that ratio. */
TEST(scale_importance_changes_choice) {
    const uint64_t n = 2, k = 32;
    uint16_t w[64];
    memset(w, 0, sizeof w);
    /* amax 3.5 → s_absmax = 3.5/57344 = 2^-14 exactly */
    w[0] = feather_f32_to_f16(3.5f);
    w[1] = feather_f32_to_f16(1.5f);            /* = 2^-14 · 1.5·2^14 */
    w[2] = feather_f32_to_f16(0.09765625f);     /* = 2^-14 · 1.25 · 1.25·2^10 */
    memcpy(w + 32, w, 64);                      /* a second, identical row */
    float e1[32] = {0}, e2[32] = {0};
    e1[1] = 1;
    e2[2] = 1;
    feather_scale_mode modes[] = {FEATHER_SCALE_TENSOR, FEATHER_SCALE_CHANNEL, FEATHER_SCALE_BLOCK};
    for (int mi = 0; mi < 3; mi++) {
        feather_quant_options o = opts_of(FEATHER_FP8_E5M2, modes[mi], 16);
        o.grid = 16; /* r_j = 1 + j/16: r_4 = 1.25 */
        float s1[4], s2[4];
        o.importance = e1;
        REQUIRE(feather_scale_search(NULL, &o, FEATHER_F16, w, n, k, s1, NULL) == FEATHER_OK);
        o.importance = e2;
        REQUIRE(feather_scale_search(NULL, &o, FEATHER_F16, w, n, k, s2, NULL) == FEATHER_OK);
        CHECK(s1[0] == 0x1p-14f);
        CHECK(s2[0] == 0x1p-14f * 1.25f);
        int row1 = modes[mi] == FEATHER_SCALE_BLOCK ? 2 : 1; /* first scale of row 1 */
        if (modes[mi] != FEATHER_SCALE_TENSOR) CHECK(s1[row1] == s1[0] && s2[row1] == s2[0]);
        if (modes[mi] == FEATHER_SCALE_BLOCK) CHECK(s1[1] == 1.0f && s2[1] == 1.0f);
    }
}

TEST(scale_zero_groups_get_one) {
    const uint64_t n = 6, k = 64;
    for (int di = 0; di < 3; di++) {
        feather_dtype dt = all_dtypes[di];
        uint8_t *w = gen(dt, n, k, D_NORMAL, 3);
        size_t es = dt == FEATHER_F32 ? 4 : 2;
        memset(w + 2 * k * es, 0, k * es);          /* row 2 all zero */
        memset(w + (4 * k + 16) * es, 0, 16 * es);  /* block (4, 1) of 16 all zero */
        for (int i = 0; i < 16; i++) {             /* row 5: block 0 is -0, block 2 NaN */
            if (dt == FEATHER_F32) {
                ((float *)w)[5 * k + i] = -0.0f;
                ((float *)w)[5 * k + 32 + i] = NAN;
            } else {
                ((uint16_t *)w)[5 * k + i] = 0x8000;
                ((uint16_t *)w)[5 * k + 32 + i] = dt == FEATHER_F16 ? 0x7e00 : 0x7fc0;
            }
        }
        feather_quant_options o = opts_of(FEATHER_FP8_E5M2, FEATHER_SCALE_BLOCK, 16);
        float sc[64];
        feather_error e;
        CHECK(feather_scale_search(NULL, &o, dt, w, n, k, sc, &e) == FEATHER_E_INVALID);
        CHECK_STR_CONTAINS(e.message, "16 NaN/Inf");
        o.allow_nonfinite = 1;
        REQUIRE(feather_scale_search(NULL, &o, dt, w, n, k, sc, &e) == FEATHER_OK);
        for (int b = 0; b < 4; b++) CHECK(sc[2 * 4 + b] == 1.0f);
        CHECK(sc[4 * 4 + 1] == 1.0f && sc[4 * 4 + 0] != 1.0f);
        CHECK(sc[5 * 4 + 0] == 1.0f && sc[5 * 4 + 2] == 1.0f && sc[5 * 4 + 1] != 1.0f);
        o.mode = FEATHER_SCALE_CHANNEL;
        REQUIRE(feather_scale_search(NULL, &o, dt, w, n, k, sc, &e) == FEATHER_OK);
        CHECK(sc[2] == 1.0f && sc[1] != 1.0f && sc[5] != 1.0f);
        memset(w, 0, (size_t)(n * k) * es);
        for (int m = FEATHER_SCALE_NONE; m <= FEATHER_SCALE_CHANNEL; m++) {
            o.mode = (feather_scale_mode)m;
            sc[0] = 0;
            REQUIRE(feather_scale_search(NULL, &o, dt, w, n, k, sc, &e) == FEATHER_OK);
            CHECK(sc[0] == 1.0f);
        }
        free(w);
    }
    /* weights so small that s_absmax would not be a normal f32: treated like zero */
    float tiny[32];
    for (int i = 0; i < 32; i++) tiny[i] = 1e-40f * (float)(i + 1);
    feather_quant_options o = opts_of(FEATHER_FP8_E5M2, FEATHER_SCALE_TENSOR, 0);
    float sc = 0;
    REQUIRE(feather_scale_search(NULL, &o, FEATHER_F32, tiny, 1, 32, &sc, NULL) == FEATHER_OK);
    CHECK(sc == 1.0f);
}

/* ---------------------------------------------------------------- real tensors ---- */

typedef void (*tensor_fn)(const char *file, const char *name, feather_dtype dt, const void *data,
                          uint64_t n, uint64_t k, void *arg);

/* Calls fn for every 2-D F16/BF16/F32 tensor of a safetensors file whose data is present. */
static int each_real_tensor(const char *path, tensor_fn fn, void *arg) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)sz + 1);
    int ok = buf && fread(buf, 1, (size_t)sz, f) == (size_t)sz;
    fclose(f);
    if (!ok || sz < 8) {
        free(buf);
        return -1;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | buf[i];
    if (hl > (uint64_t)sz - 8) {
        free(buf);
        return -1;
    }
    cJSON *h = cJSON_ParseWithLength((const char *)buf + 8, (size_t)hl);
    int count = 0;
    for (cJSON *t = h ? h->child : NULL; t; t = t->next) {
        cJSON *dt = cJSON_GetObjectItem(t, "dtype"), *sh = cJSON_GetObjectItem(t, "shape"),
              *of = cJSON_GetObjectItem(t, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || cJSON_GetArraySize(sh) != 2 ||
            !cJSON_IsArray(of))
            continue;
        feather_dtype d;
        if (!strcmp(dt->valuestring, "F16")) d = FEATHER_F16;
        else if (!strcmp(dt->valuestring, "BF16")) d = FEATHER_BF16;
        else if (!strcmp(dt->valuestring, "F32")) d = FEATHER_F32;
        else continue;
        uint64_t n = (uint64_t)cJSON_GetArrayItem(sh, 0)->valuedouble,
                 k = (uint64_t)cJSON_GetArrayItem(sh, 1)->valuedouble,
                 b = (uint64_t)cJSON_GetArrayItem(of, 0)->valuedouble,
                 e = (uint64_t)cJSON_GetArrayItem(of, 1)->valuedouble;
        uint64_t es = d == FEATHER_F32 ? 4 : 2;
        if (e < b || e - b != n * k * es || 8 + hl + e > (uint64_t)sz) continue;
        fn(path, t->string, d, buf + 8 + hl + b, n, k, arg);
        count++;
    }
    cJSON_Delete(h);
    free(buf);
    return count;
}

static const char *real_files[] = {
    "leighwoods_flux_lora_f16.safetensors", "vfph55_sd15_lora_bf16.safetensors",
    "bk7195_pythia_lora_f16.safetensors",   "branbot6_lora_f32.safetensors",
    "tl_reverse_model_f32.safetensors",     "mlx_adapters_f32.safetensors",
    "elyas_mnist_mlp_f32.safetensors",      "bumblebee_site_f32.safetensors"};

static void real_check(const char *file, const char *name, feather_dtype dt, const void *data,
                       uint64_t n, uint64_t k, void *arg) {
    int *checked = arg;
    (void)file;
    float *sc = malloc(sizeof(float) * (size_t)(n * k + 1));
    for (int mi = 0; mi < 4; mi++)
        for (unsigned g = 16; g <= 128; g *= 8) {
            if (all_modes[mi] == FEATHER_SCALE_BLOCK ? k % g != 0 : g > 16) continue;
            feather_quant_options o = opts_of(FEATHER_FP8_E5M2, all_modes[mi], g);
            o.name = name;
            o.format = (*checked & 1) ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2;
            feather_error e;
            if (feather_scale_search(NULL, &o, dt, data, n, k, sc, &e) != FEATHER_OK) {
                test_fail(__FILE__, __LINE__, "%s: %s", name, e.message);
                continue;
            }
            if (all_modes[mi] == FEATHER_SCALE_ABSMAX) continue;
            char what[300];
            snprintf(what, sizeof what, "%s mode %d G %u", name, mi, g);
            check_never_worse(what, &o, dt, data, n, k, sc);
        }
    (*checked)++;
    free(sc);
}

TEST(scale_never_worse_than_absmax_real) {
    int checked = 0, files = 0;
    for (size_t i = 0; i < sizeof real_files / sizeof *real_files; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", test_real_dir(), real_files[i]);
        if (each_real_tensor(path, real_check, &checked) >= 0) files++;
    }
    if (!files) {
        test_skip("no real test files found (FEATHER_TESTDATA)");
        return;
    }
    CHECK(checked > 100);
}

TEST(scale_search_cancelled) {
    void *w = gen(FEATHER_F16, 64, 256, D_NORMAL, 5);
    for (int mi = 0; mi < 4; mi++) {
        feather_quant_options o = opts_of(FEATHER_FP8_E5M2, all_modes[mi], 32);
        float sc[512];
        feather_error e;
        feather_cancel();
        feather_status st = feather_scale_search(NULL, &o, FEATHER_F16, w, 64, 256, sc, &e);
        feather_cancel_reset();
        CHECK(st == FEATHER_E_CANCELLED);
        CHECK(feather_scale_search(NULL, &o, FEATHER_F16, w, 64, 256, sc, &e) == FEATHER_OK);
    }
    free(w);
}

/* Rows longer than the streaming threshold (64k elements) are converted chunk by chunk; the
 * scales must still be exactly those of the definition, at every SIMD level and thread count. */
TEST(scale_long_rows_exact) {
    feather_simd lv[3];
    int nl = simd_levels(lv);
    const uint64_t n = 3, k = 70001; /* not a multiple of 16 either */
    feather_ctx *ctx = feather_ctx_new(2);
    REQUIRE(ctx);
    float *imp = malloc(sizeof(float) * k);
    for (uint64_t i = 0; i < k; i++) imp[i] = (float)rng_unit();
    for (int di = 0; di < 3; di += 2) {
        void *w = gen(all_dtypes[di], n, k, D_STUDENT, 31);
        for (int wi = 0; wi < 2; wi++) {
            feather_quant_options o = opts_of(FEATHER_FP8_E5M2, FEATHER_SCALE_CHANNEL, 0);
            o.importance = wi ? imp : NULL;
            float ref[3], got[3];
            REQUIRE(feather_scale_search(NULL, &o, all_dtypes[di], w, n, k, ref, NULL) == FEATHER_OK);
            check_exact("long rows", &o, all_dtypes[di], w, n, k, ref);
            for (int li = 0; li < nl; li++) {
                feather_ctx_set_simd(ctx, lv[li]);
                REQUIRE(feather_scale_search(ctx, &o, all_dtypes[di], w, n, k, got, NULL) == FEATHER_OK);
                CHECK(!memcmp(ref, got, sizeof ref));
            }
            /* F32 tensor mode streams its rows the same way */
            o.mode = FEATHER_SCALE_TENSOR;
            float t1, t2;
            feather_ctx_set_simd(ctx, FEATHER_SIMD_SCALAR);
            REQUIRE(feather_scale_search(ctx, &o, all_dtypes[di], w, n, k, &t1, NULL) == FEATHER_OK);
            feather_ctx_set_simd(ctx, lv[nl - 1]);
            REQUIRE(feather_scale_search(ctx, &o, all_dtypes[di], w, n, k, &t2, NULL) == FEATHER_OK);
            CHECK(t1 == t2);
            check_never_worse("long rows tensor", &o, all_dtypes[di], w, n, k, &t1);
        }
        free(w);
    }
    free(imp);
    feather_ctx_free(ctx);
}

/* Tensor mode of a large 16-bit tensor: per-thread tables, 16-bit counters emptied before
 * they wrap (some patterns here occur far more than 65535 times), merged over threads. The
 * objective must equal the direct evaluation and not depend on threads or SIMD level. */
TEST(scale_histogram_large_tensor) {
    const uint64_t n = 1100, k = 1024; /* 1.1M elements: the histogram is split over threads */
    feather_simd lv[3];
    int nl = simd_levels(lv);
    feather_ctx *ctx[3] = {feather_ctx_new(1), feather_ctx_new(2), feather_ctx_new(4)};
    REQUIRE(ctx[0] && ctx[1] && ctx[2]);
    float imp[1024];
    for (int i = 0; i < 1024; i++) imp[i] = (float)(rng_u64() % 33) / 8.0f;
    for (int di = 0; di < 2; di++) {
        feather_dtype dt = all_dtypes[di];
        uint16_t *w = gen(dt, n, k, D_STUDENT, 808);
        for (uint64_t i = 0; i < n * k; i += 3) w[i] = 0;            /* 370k zeros */
        for (uint64_t i = 1; i < n * k; i += 7) w[i] = w[1] ^ 0x8000; /* 160k of one magnitude */
        for (uint64_t i = 0; i < 300000; i++) w[i] = w[2]; /* a run: counters hit 65535 exactly */
        for (int wi = 0; wi < 2; wi++) {
            feather_quant_options o = opts_of(FEATHER_FP8_E5M2, FEATHER_SCALE_TENSOR, 0);
            o.importance = wi ? imp : NULL;
            float r[8], ref, got;
            double obj[8], obj2[8];
            for (unsigned j = 0; j < 8; j++) r[j] = 1.0f + (float)j / 8.0f;
            feather_ctx_set_simd(ctx[0], FEATHER_SIMD_SCALAR);
            REQUIRE(feather_scale_search_ratios(ctx[0], &o, dt, w, n, k, r, 8, &ref, obj, NULL) ==
                    FEATHER_OK);
            for (int li = 0; li < nl; li++)
                for (int t = 0; t < 3; t++) {
                    feather_ctx_set_simd(ctx[t], lv[li]);
                    REQUIRE(feather_scale_search_ratios(ctx[t], &o, dt, w, n, k, r, 8, &got, obj2,
                                                        NULL) == FEATHER_OK);
                    CHECK(got == ref && !memcmp(obj, obj2, sizeof obj));
                }
            if (wi) continue; /* the direct check once per dtype (it is the slow part) */
            float sa = group_amax(dt, w, 0, (size_t)(n * k)) / FEATHER_E5M2_MAX;
            for (unsigned j = 0; j < 8; j += 7) {
                double d = direct_err(dt, w, n, k, NULL, sa * r[j], FEATHER_FP8_E5M2);
                CHECK(fabs(obj[j] - d) <= 1e-9 * d);
            }
        }
        free(w);
    }
    for (int t = 0; t < 3; t++) feather_ctx_free(ctx[t]);
}

/* Counter limits at a window's edge: 4·65534 + 3 equal BF16 weights (four tables) and
 * 2·65534 + 1 equal F16 weights (two tables) — every 16-bit counter ends at 65535 or below. */
TEST(scale_histogram_counter_edges) {
    const uint64_t sizes[2] = {4 * 65534 + 3, 2 * 65534 + 1};
    for (int di = 0; di < 2; di++) {
        feather_dtype dt = di ? FEATHER_F16 : FEATHER_BF16;
        uint64_t n = sizes[di];
        uint16_t *w = malloc(sizeof *w * (size_t)n);
        REQUIRE(w);
        uint16_t v = dt == FEATHER_F16 ? feather_f32_to_f16(0.0173f) : feather_f32_to_bf16(0.0173f);
        for (uint64_t i = 0; i < n; i++) w[i] = v;
        w[n - 1] = v + 3; /* a second value, so that the scale is not exact for the first */
        feather_quant_options o = opts_of(FEATHER_FP8_E5M2, FEATHER_SCALE_TENSOR, 0);
        float r[4] = {1, 1.25f, 1.5f, 1.75f}, sc;
        double obj[4];
        REQUIRE(feather_scale_search_ratios(NULL, &o, dt, w, 1, n, r, 4, &sc, obj, NULL) ==
                FEATHER_OK);
        float sa = group_amax(dt, w, 0, (size_t)n) / FEATHER_E5M2_MAX;
        for (int j = 0; j < 4; j++) {
            double d = direct_err(dt, w, 1, n, NULL, sa * r[j], FEATHER_FP8_E5M2);
            if (!(fabs(obj[j] - d) <= 1e-9 * d))
                test_fail(__FILE__, __LINE__, "dt %d cand %d: histogram %.12g direct %.12g", di, j,
                          obj[j], d);
        }
        free(w);
    }
}

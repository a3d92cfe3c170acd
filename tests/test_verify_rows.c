/* The verifier's fused row work (src/verify_rows.h): every SIMD level returns the same bits, and
 * the sums agree with a double-precision computation of the same quantities. Shapes cover both
 * layouts, every source dtype, both fp8 formats, every scale mode, a K that is not a multiple of
 * 16 (plain layout), a block of fewer rows than VROWS_RB and odd numbers of activation rows;
 * and originals holding NaN/Inf, which are left out of the sums and counted. */
#include "test.h"
#include "testutil.h"
#include "verify_rows.h"
#include "feather/fp8.h"

#include <math.h>
#include <stdlib.h>

typedef struct vcase {
    uint64_t n, k, m;
    feather_dtype dt;
    int packed;
    feather_fp8 fmt;
    feather_scale_mode mode;
    unsigned group;
    int bad; /* Inf/NaN codes planted */
    int nonfinite; /* NaN/Inf originals planted */
} vcase;

typedef struct vdata {
    vcase c;
    void *w;
    uint8_t *q, *plain; /* plain: codes as (N, K) */
    float *scales, *a; /* a: verify_rows.h's layout */
} vdata;

static int is_bad(uint8_t c, feather_fp8 f) {
    return f == FEATHER_FP8_E5M2 ? (c & 0x7c) == 0x7c : (c & 0x7f) == 0x7f;
}

static void make_data(vdata *d, const vcase *c, uint64_t seed) {
    d->c = *c;
    uint64_t s = seed, n = c->n, k = c->k;
    const size_t esz = c->dt == FEATHER_F32 ? 4 : 2;
    d->w = malloc(n * k * esz);
    d->plain = malloc(n * k);
    d->q = malloc(n * k);
    for (uint64_t i = 0; i < n * k; i++) {
        const float v = (float)(0.02 * tu_normal(&s));
        if (c->dt == FEATHER_F32) ((float *)d->w)[i] = v;
        else if (c->dt == FEATHER_F16) ((uint16_t *)d->w)[i] = feather_f32_to_f16(v);
        else ((uint16_t *)d->w)[i] = feather_f32_to_bf16(v);
        uint8_t code;
        do code = (uint8_t)tu_rand(&s); while (is_bad(code, c->fmt));
        d->plain[i] = code;
    }
    for (int b = 0; b < c->bad; b++) d->plain[tu_rand(&s) % (n * k)] = c->fmt == FEATHER_FP8_E5M2 ? 0x7e : 0xff;
    for (int b = 0; b < c->nonfinite; b++) {
        const float v = b % 3 == 0 ? NAN : b % 3 == 1 ? INFINITY : -INFINITY;
        const uint64_t i = tu_rand(&s) % (n * k);
        if (c->dt == FEATHER_F32) ((float *)d->w)[i] = v;
        else if (c->dt == FEATHER_F16) ((uint16_t *)d->w)[i] = feather_f32_to_f16(v);
        else ((uint16_t *)d->w)[i] = feather_f32_to_bf16(v);
    }
    if (c->packed) feather_pack(d->plain, n, k, d->q);
    else memcpy(d->q, d->plain, n * k);
    const uint64_t ns = c->mode == FEATHER_SCALE_CHANNEL ? n : c->mode == FEATHER_SCALE_BLOCK ? n * (k / c->group) : 1;
    d->scales = malloc(ns * sizeof(float));
    for (uint64_t i = 0; i < ns; i++) d->scales[i] = (float)(1e-4 * (1 + (tu_rand(&s) % 1000)));
    d->a = calloc(vrows_a_size(c->m, k), sizeof(float));
    for (uint64_t t = 0; t < c->m; t++)
        for (uint64_t j = 0; j < k; j++)
            d->a[vrows_a_index(c->m, t, j)] = feather_f16_to_f32(feather_f32_to_f16((float)tu_normal(&s)));
}

static void free_data(vdata *d) {
    free(d->w);
    free(d->q);
    free(d->plain);
    free(d->scales);
    free(d->a);
}

typedef struct vout {
    float *yref, *ydeq;
    double *rowsums;
    uint64_t bad;
} vout;

static void run_level(const vdata *d, feather_simd level, vout *o) {
    const vcase *c = &d->c;
    o->yref = malloc(c->m * c->n * sizeof(float));
    o->ydeq = malloc(c->m * c->n * sizeof(float));
    o->rowsums = malloc(c->n * VS_COUNT * sizeof(double));
    vrows_kernels kn;
    feather_vrows_kernels(level, &kn);
    vrows_weight w = {.w = d->w, .wdt = c->dt, .q = d->q, .packed = c->packed, .fmt = c->fmt, .scales = d->scales,
                      .mode = c->mode, .group = c->group, .n = c->n, .k = c->k, .a = d->a, .m = c->m,
                      .yref = o->yref, .ydeq = o->ydeq, .rowsums = o->rowsums};
    float *scr = aligned_alloc(64, (feather_vrows_scratch(&w) + 15) / 16 * 64);
    o->bad = 0;
    for (uint64_t b = 0; b < (c->n + VROWS_RB - 1) / VROWS_RB; b++) o->bad += feather_vrows_block(&kn, &w, b, scr);
    if (tu_vector_upper_in_use() == 1) /* SSE code after the kernels would crawl */
        test_fail(__FILE__, __LINE__, "%s kernels leave the vector registers' upper halves in use", feather_simd_name(level));
    free(scr);
}

static void free_out(vout *o) {
    free(o->yref);
    free(o->ydeq);
    free(o->rowsums);
}

static float scale_at(const vdata *d, uint64_t r, uint64_t j) {
    const vcase *c = &d->c;
    switch (c->mode) {
    case FEATHER_SCALE_CHANNEL: return d->scales[r];
    case FEATHER_SCALE_BLOCK: return d->scales[r * (c->k / c->group) + j / c->group];
    default: return d->scales[0];
    }
}

/* |got − want| ≤ rel · scale (scale: the sum of the terms' magnitudes). */
static int close_to(double got, double want, double scale, double rel) {
    return fabs(got - want) <= rel * scale + 1e-30;
}

/* The double-precision sums: ≤ 1e-5 of the terms' magnitudes apart (f32 lanes of at most a few
 * hundred terms each lose far less). */
static void check_against_double(const vdata *d, const vout *o) {
    const vcase *c = &d->c;
    const double rel = 1e-5;
    int bad_rows = 0, bad_products = 0;
    for (uint64_t r = 0; r < c->n; r++) {
        double ww = 0, ee = 0, wd = 0, awd = 0, dd = 0, mx = 0, nf = 0;
        for (uint64_t j = 0; j < c->k; j++) {
            const double w0 = feather_load_f32(c->dt, d->w, r * c->k + j);
            const float df = feather_fp8_to_f32(d->plain[r * c->k + j], c->fmt) * scale_at(d, r, j); /* d as defined */
            /* a NaN/Inf original is left out */
            const int fin = isfinite(w0);
            const double w = fin ? w0 : 0, dv = fin ? df : 0, e = w - dv;
            nf += !fin;
            ww += w * w;
            ee += e * e;
            wd += w * dv;
            awd += fabs(w * dv);
            dd += dv * dv;
            if (fabs(e) > mx) mx = fabs(e);
        }
        const double *g = o->rowsums + r * VS_COUNT;
        if (!close_to(g[VS_WW], ww, ww, rel) || !close_to(g[VS_EE], ee, ee, rel) || !close_to(g[VS_WD], wd, awd, rel) ||
            !close_to(g[VS_DD], dd, dd, rel) || !close_to(g[VS_MAX], mx, mx, 1e-6) || g[VS_NF] != nf)
            bad_rows++;
        for (uint64_t t = 0; t < c->m; t++) {
            double yw = 0, yd = 0, sw = 0, sd = 0;
            for (uint64_t j = 0; j < c->k; j++) {
                const double a = d->a[vrows_a_index(c->m, t, j)], w0 = feather_load_f32(c->dt, d->w, r * c->k + j);
                const double dv = feather_fp8_to_f32(d->plain[r * c->k + j], c->fmt) * scale_at(d, r, j);
                const double w = isfinite(w0) ? w0 : dv; /* the reference takes what it was mapped to */
                yw += a * w;
                sw += fabs(a * w);
                yd += a * dv;
                sd += fabs(a * dv);
            }
            if (!close_to(o->yref[t * c->n + r], yw, sw, rel) || !close_to(o->ydeq[t * c->n + r], yd, sd, rel))
                bad_products++;
        }
    }
    if (bad_rows || bad_products)
        test_fail(__FILE__, __LINE__, "%llux%llu %s %s %s: %d rows' sums and %d products off the double values",
                  (unsigned long long)c->n, (unsigned long long)c->k, feather_dtype_name(c->dt),
                  c->packed ? "packed" : "plain", feather_fp8_name(c->fmt), bad_rows, bad_products);
}

static const vcase cases[] = {
    {40, 96, 16, FEATHER_BF16, 1, FEATHER_FP8_E5M2, FEATHER_SCALE_CHANNEL, 0, 0, 0},
    {24, 512, 5, FEATHER_F16, 1, FEATHER_FP8_E5M2, FEATHER_SCALE_BLOCK, 32, 0, 0},
    {13, 40, 3, FEATHER_F32, 0, FEATHER_FP8_E4M3FN, FEATHER_SCALE_TENSOR, 0, 0, 0},
    {40, 96, 16, FEATHER_BF16, 1, FEATHER_FP8_E5M2, FEATHER_SCALE_CHANNEL, 0, 0, 9},
    {24, 512, 5, FEATHER_F16, 1, FEATHER_FP8_E4M3FN, FEATHER_SCALE_BLOCK, 32, 0, 7},
    {13, 40, 3, FEATHER_F32, 0, FEATHER_FP8_E5M2, FEATHER_SCALE_TENSOR, 0, 0, 5},
    {7, 300, 1, FEATHER_BF16, 0, FEATHER_FP8_E5M2, FEATHER_SCALE_CHANNEL, 0, 0, 0},
    {64, 272, 17, FEATHER_BF16, 1, FEATHER_FP8_E4M3FN, FEATHER_SCALE_BLOCK, 16, 0, 0},
    {16, 64, 4, FEATHER_F16, 1, FEATHER_FP8_E5M2, FEATHER_SCALE_TENSOR, 0, 5, 0},
    {9, 33, 2, FEATHER_F16, 0, FEATHER_FP8_E4M3FN, FEATHER_SCALE_CHANNEL, 0, 3, 0},
};

TEST(verify_rows_agree_with_double_and_across_simd_levels) {
    const feather_simd levels[] = {FEATHER_SIMD_SCALAR, FEATHER_SIMD_AVX2, FEATHER_SIMD_AVX512};
    const feather_simd top = feather_simd_cpu();
    if (top < FEATHER_SIMD_AVX512)
        printf("    (this CPU has no %s: that level is not compared)\n", top < FEATHER_SIMD_AVX2 ? "AVX2" : "AVX-512");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        vdata d;
        make_data(&d, &cases[i], 1000 + i);
        vout ref;
        run_level(&d, FEATHER_SIMD_SCALAR, &ref);
        uint64_t planted = 0;
        for (uint64_t j = 0; j < d.c.n * d.c.k; j++) planted += is_bad(d.plain[j], d.c.fmt);
        CHECK_EQ_U(ref.bad, planted);
        uint64_t nonfinite = 0;
        double counted = 0;
        for (uint64_t j = 0; j < d.c.n * d.c.k; j++) nonfinite += !isfinite(feather_load_f32(d.c.dt, d.w, j));
        for (uint64_t r = 0; r < d.c.n; r++) counted += ref.rowsums[r * VS_COUNT + VS_NF];
        CHECK(cases[i].nonfinite ? nonfinite > 0 : nonfinite == 0);
        CHECK(counted == (double)nonfinite);
        if (!cases[i].bad) check_against_double(&d, &ref);
        for (size_t l = 1; l < 3 && levels[l] <= top; l++) {
            vout o;
            run_level(&d, levels[l], &o);
            const size_t mn = d.c.m * d.c.n * sizeof(float);
            /* with planted Inf/NaN codes only the count is defined */
            if (!cases[i].bad && (memcmp(o.yref, ref.yref, mn) || memcmp(o.ydeq, ref.ydeq, mn) ||
                                  memcmp(o.rowsums, ref.rowsums, d.c.n * VS_COUNT * sizeof(double))))
                test_fail(__FILE__, __LINE__, "case %zu: %s differs from scalar", i, feather_simd_name(levels[l]));
            CHECK_EQ_U(o.bad, ref.bad);
            free_out(&o);
        }
        free_out(&ref);
        free_data(&d);
    }
}

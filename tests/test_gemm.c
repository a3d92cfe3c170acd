/* Matrix product with a prepacked e5m2 weight: the CPU implementation at every SIMD level and,
 * where a GPU is usable, the GPU kernels, against an fp64 product of the same dequantised
 * weights, on fresh random inputs each run (the seed is printed). */
#include "test.h"
#include "feather/feather.h"
#include "gemm_cpu.h"
#include "internal.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>
#include "../kernels/fk_api.h" /* the kernel variants the GPU tests expect */

/* ---- random problems ---- */
static uint64_t rng_state;
static uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static double rng_unit(void) { return ((rng_next() >> 11) + 0.5) / 9007199254740992.0; }
static double rng_normal(void) { return sqrt(-2.0 * log(rng_unit())) * cos(6.283185307179586 * rng_unit()); }

static void seed_once(void) {
    if (!rng_state) {
        const char *s = getenv("FEATHER_TEST_SEED");
        rng_state = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) * 2654435761u + (uint64_t)clock();
        if (!rng_state) rng_state = 1;
        printf("    gemm tests: FEATHER_TEST_SEED=%llu\n", (unsigned long long)rng_state);
    }
}

typedef struct problem {
    feather_gemm_args args;
    uint16_t *a, *bias, *y;
    uint8_t *q, *packed;
    float *scales;
    double *ref, *ad; /* ad: A in double, for the reference */
} problem;

static uint64_t nscales(feather_scale_mode mode, uint64_t n, uint64_t k, unsigned g) {
    switch (mode) {
    case FEATHER_SCALE_NONE: return 0;
    case FEATHER_SCALE_CHANNEL: return n;
    case FEATHER_SCALE_BLOCK: return n * (k / g);
    default: return 1;
    }
}

static double scale_of(const problem *p, uint64_t n, uint64_t k) {
    const feather_gemm_args *a = &p->args;
    switch (a->mode) {
    case FEATHER_SCALE_NONE: return 1.0;
    case FEATHER_SCALE_CHANNEL: return p->scales[n];
    case FEATHER_SCALE_BLOCK: return p->scales[n * (a->k / a->group) + k / a->group];
    default: return p->scales[0];
    }
}

/* ref[:, r] for weight rows r in [b, e). */
static void reference_rows(void *arg, size_t b, size_t e, int worker) {
    problem *p = arg;
    const feather_gemm_args *a = &p->args;
    const uint64_t m = a->m, n = a->n, k = a->k;
    double *wrow = malloc(k * sizeof(double));
    (void)worker;
    for (uint64_t r = b; r < e; r++) {
        for (uint64_t c = 0; c < k; c++) wrow[c] = scale_of(p, r, c) * feather_e5m2_to_f32(p->q[r * k + c]);
        double bias = !p->bias ? 0.0 : a->out_bf16 ? feather_bf16_to_f32(p->bias[r]) : feather_f16_to_f32(p->bias[r]);
        for (uint64_t i = 0; i < m; i++) {
            const double *ar = p->ad + i * k;
            double t = 0;
            for (uint64_t c = 0; c < k; c++) t += ar[c] * wrow[c];
            p->ref[i * n + r] = t + bias;
        }
    }
    free(wrow);
}

/* The last weight drawn: a problem of the same N and K takes it again rather than drawing
 * N·K normals anew, which took most of the GPU test's minutes (N·K up to 19 M, some hundred
 * problems per shape: every M, scale mode and output type). */
static struct {
    uint64_t n, k;
    uint8_t *q, *packed;
} last_weight;

/* A ~ N(0,1) in fp16; Q = e5m2 of N(0,1)·8 (finite codes only), or the last problem's Q where
 * N and K are the same; scales in [0.5, 2)·2^-3 per group; bias ~ N(0,1)·|typical output| in
 * the output dtype, or none. */
static void problem_make(feather_ctx *ctx, problem *p, uint64_t m, uint64_t n, uint64_t k, feather_scale_mode mode,
                         unsigned g, int bias, int out_bf16) {
    memset(p, 0, sizeof *p);
    feather_gemm_args *a = &p->args;
    a->m = m; a->n = n; a->k = k; a->mode = mode; a->group = g; a->out_bf16 = out_bf16;
    p->a = malloc(m * k * 2 + 2);
    p->q = malloc(n * k);
    p->packed = malloc(n * k);
    uint64_t ns = nscales(mode, n, k, g);
    p->scales = malloc((ns ? ns : 1) * sizeof(float));
    p->bias = bias ? malloc(n * 2) : NULL;
    p->y = malloc(m * n * 2 + 2);
    p->ref = malloc(m * n * sizeof(double) + 8);
    p->ad = malloc(m * k * sizeof(double));
    for (uint64_t i = 0; i < m * k; i++) {
        p->a[i] = feather_f32_to_f16((float)rng_normal());
        p->ad[i] = feather_f16_to_f32(p->a[i]);
    }
    if (last_weight.q && last_weight.n == n && last_weight.k == k) {
        memcpy(p->q, last_weight.q, n * k);
        memcpy(p->packed, last_weight.packed, n * k);
    } else {
        for (uint64_t i = 0; i < n * k; i++) p->q[i] = feather_f32_to_e5m2((float)(rng_normal() * 8.0));
        /* packed[kb][n][i] = Q[n][16kb+i] */
        for (uint64_t r = 0; r < n; r++)
            for (uint64_t c = 0; c < k; c++) p->packed[(c / 16) * n * 16 + r * 16 + c % 16] = p->q[r * k + c];
        free(last_weight.q);
        free(last_weight.packed);
        last_weight.q = malloc(n * k);
        last_weight.packed = malloc(n * k);
        if (last_weight.q && last_weight.packed) {
            memcpy(last_weight.q, p->q, n * k);
            memcpy(last_weight.packed, p->packed, n * k);
            last_weight.n = n;
            last_weight.k = k;
        } else {
            free(last_weight.q);
            free(last_weight.packed);
            last_weight.q = last_weight.packed = NULL;
        }
    }
    for (uint64_t i = 0; i < ns; i++) p->scales[i] = (float)((0.5 + 1.5 * rng_unit()) / 8.0);
    double typical = sqrt((double)k) * 8.0 / 8.0;
    for (uint64_t i = 0; bias && i < n; i++) {
        float b = (float)(rng_normal() * typical);
        p->bias[i] = out_bf16 ? feather_f32_to_bf16(b) : feather_f32_to_f16(b);
    }
    a->a = p->a;
    a->q = p->packed;
    a->scales = ns ? p->scales : NULL;
    a->bias = p->bias;
    a->y = p->y;
    /* fp64 reference of the dequantised product, over the context's threads */
    feather_parallel_for(ctx, n, 8, reference_rows, p);
}

static void problem_free(problem *p) {
    free(p->a); free(p->q); free(p->packed); free(p->scales); free(p->bias); free(p->y); free(p->ref); free(p->ad);
}

static void poison(problem *p) { memset(p->y, 0xff, p->args.m * p->args.n * 2); }

/* ‖Y − ref‖_F / ‖ref‖_F; NaN or Inf anywhere gives +Inf. */
static double rel_error(const problem *p) {
    double e = 0, r = 0;
    const uint64_t cnt = p->args.m * p->args.n;
    for (uint64_t i = 0; i < cnt; i++) {
        double v = p->args.out_bf16 ? feather_bf16_to_f32(p->y[i]) : feather_f16_to_f32(p->y[i]);
        if (!isfinite(v)) return INFINITY;
        e += (v - p->ref[i]) * (v - p->ref[i]);
        r += p->ref[i] * p->ref[i];
    }
    return sqrt(e) / (r > 0 ? sqrt(r) : 1.0);
}

static const char *mode_str(feather_scale_mode mode, unsigned g, char *buf) {
    static const char *names[] = {"none", "absmax", "tensor", "channel", "block"};
    if (mode == FEATHER_SCALE_BLOCK) snprintf(buf, 32, "block:%u", g);
    else snprintf(buf, 32, "%s", names[mode]);
    return buf;
}

typedef struct mode_case { feather_scale_mode mode; unsigned group; } mode_case;
static const mode_case MODES[] = {
    {FEATHER_SCALE_NONE, 0},     {FEATHER_SCALE_ABSMAX, 0},  {FEATHER_SCALE_TENSOR, 0},
    {FEATHER_SCALE_CHANNEL, 0},  {FEATHER_SCALE_BLOCK, 32},  {FEATHER_SCALE_BLOCK, 64},
    {FEATHER_SCALE_BLOCK, 128},  {FEATHER_SCALE_BLOCK, 16},  {FEATHER_SCALE_BLOCK, 48},
};
#define NMODES (sizeof MODES / sizeof MODES[0])

static double tolerance(int out_bf16) { return out_bf16 ? 2e-3 : 5e-4; }
/* The final rounding to bf16 alone costs about 1.6e-3 of relative error, spread like a mean of
 * squares: a case needs this many outputs for that spread to stay far below the 2e-3 bound. */
#define MIN_OUTPUTS 1000

/* Runs one problem on dev and checks it; returns 0 when it passed. */
static int run_case(feather_ctx *ctx, feather_device dev, problem *p, const char *what) {
    feather_error err = {0};
    char mb[32];
    poison(p);
    feather_status st = feather_gemm(ctx, dev, &p->args, &err);
    if (st != FEATHER_OK) {
        test_fail(__FILE__, __LINE__, "%s: feather_gemm failed: %s", what, err.message);
        return 1;
    }
    double e = rel_error(p), tol = tolerance(p->args.out_bf16);
    if (!(e <= tol)) {
        test_fail(__FILE__, __LINE__, "%s M=%llu N=%llu K=%llu %s %s%s: relative error %.3g > %.1g", what,
                  (unsigned long long)p->args.m, (unsigned long long)p->args.n, (unsigned long long)p->args.k,
                  mode_str(p->args.mode, p->args.group, mb), p->args.out_bf16 ? "bf16" : "fp16",
                  p->args.bias ? " +bias" : "", e, tol);
        return 1;
    }
    return 0;
}

/* ---- CPU ---- */
TEST(gemm_cpu_matches_fp64_every_mode_and_simd_level) {
    seed_once();
    feather_ctx *ctx = feather_ctx_new(0);
    REQUIRE(ctx);
    static const uint64_t shapes[][2] = {{64, 128}, {40, 96}, {1032, 96}, {136, 384}};
    static const uint64_t ms[] = {1, 7, 16, 33, 128};
    const feather_simd top = feather_simd_detect();
    double worst[2] = {0, 0};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
            for (size_t c = 0; c < NMODES; c++) {
                const uint64_t n = shapes[si][0], k = shapes[si][1], m = ms[mi];
                if (!feather_gemm_supported(n, k, MODES[c].mode, MODES[c].group)) continue;
                if (m * n < MIN_OUTPUTS) continue;
                const int bf16 = (int)((si + mi + c) & 1), bias = (int)((si + c) % 3 != 0);
                problem p;
                problem_make(ctx, &p, m, n, k, MODES[c].mode, MODES[c].group, bias, bf16);
                uint16_t *first = malloc(m * n * 2);
                for (int lvl = FEATHER_SIMD_SCALAR; lvl <= (int)top; lvl++) {
                    REQUIRE(feather_ctx_set_simd(ctx, (feather_simd)lvl) == FEATHER_OK);
                    if (run_case(ctx, FEATHER_DEVICE_CPU, &p, feather_simd_name((feather_simd)lvl))) break;
                    double e = rel_error(&p);
                    if (e > worst[bf16]) worst[bf16] = e;
                    /* every level sums in the same order: the same bytes */
                    if (lvl == FEATHER_SIMD_SCALAR) memcpy(first, p.y, m * n * 2);
                    else if (memcmp(first, p.y, m * n * 2)) {
                        test_fail(__FILE__, __LINE__, "SIMD level %s differs from scalar (M=%llu N=%llu K=%llu)",
                                  feather_simd_name((feather_simd)lvl), (unsigned long long)m,
                                  (unsigned long long)n, (unsigned long long)k);
                        break;
                    }
                }
                free(first);
                problem_free(&p);
            }
    printf("    worst relative error: fp16 %.3g, bf16 %.3g\n", worst[0], worst[1]);
    feather_ctx_free(ctx);
}

TEST(gemm_cpu_many_rows_and_threads) {
    seed_once();
    feather_ctx *ctx = feather_ctx_new(3);
    REQUIRE(ctx);
    problem p;
    problem_make(ctx, &p, 1000, 72, 64, FEATHER_SCALE_BLOCK, 32, 1, 0);
    run_case(ctx, FEATHER_DEVICE_CPU, &p, "cpu");
    /* one thread gives the same bytes */
    uint16_t *y3 = malloc(p.args.m * p.args.n * 2);
    memcpy(y3, p.y, p.args.m * p.args.n * 2);
    run_case(NULL, FEATHER_DEVICE_CPU, &p, "cpu, no context");
    CHECK(memcmp(y3, p.y, p.args.m * p.args.n * 2) == 0);
    free(y3);
    problem_free(&p);
    feather_ctx_free(ctx);
}

/* The host's check before the GPU keeps a sum in units of the current group's scale. */
TEST(gemm_block_scales_rescalable_rule) {
    float s[4] = {0.25f, 1e-3f, 3.0f, 0.5f};
    CHECK(feather_block_scales_rescalable(s, 4));
    CHECK(feather_block_scales_rescalable(s, 0));
    s[1] = -1e-3f; /* a sign does not matter */
    CHECK(feather_block_scales_rescalable(s, 4));
    s[1] = 0.0f;
    CHECK(!feather_block_scales_rescalable(s, 4));
    s[1] = INFINITY;
    CHECK(!feather_block_scales_rescalable(s, 4));
    s[1] = NAN;
    CHECK(!feather_block_scales_rescalable(s, 4));
    s[1] = 1e-38f; /* below 2^-40 of the largest */
    CHECK(!feather_block_scales_rescalable(s, 4));
    s[0] = s[1] = s[2] = s[3] = 0x1p-126f; /* the smallest normal float */
    CHECK(feather_block_scales_rescalable(s, 4));
    s[1] = 0x1p-127f; /* subnormal, though within 2^40 */
    CHECK(!feather_block_scales_rescalable(s, 4));
    s[0] = s[1] = s[2] = s[3] = 0x1p126f;
    CHECK(feather_block_scales_rescalable(s, 4));
    s[1] = 0x1p127f; /* past the fast division's range, though within 2^40 */
    CHECK(!feather_block_scales_rescalable(s, 4));
    s[0] = s[2] = s[3] = 0x1p40f;
    s[1] = 1.0f; /* exactly 2^40 apart */
    CHECK(feather_block_scales_rescalable(s, 4));
    s[1] = 0.99f;
    CHECK(!feather_block_scales_rescalable(s, 4));
}

TEST(gemm_zero_rows_is_a_no_op) {
    uint8_t q[16 * 8] = {0};
    uint16_t y = 0x1234;
    feather_gemm_args a = {0};
    a.m = 0; a.n = 8; a.k = 16; a.q = q; a.y = &y; a.mode = FEATHER_SCALE_NONE;
    CHECK(feather_gemm(NULL, FEATHER_DEVICE_CPU, &a, NULL) == FEATHER_OK);
    CHECK_EQ_U(y, 0x1234);
}

TEST(gemm_rejects_shapes_outside_the_rule) {
    uint16_t A[64] = {0}, Y[64];
    uint8_t Q[64 * 64] = {0};
    float s[64] = {1};
    feather_gemm_args a = {0};
    feather_error err;
    a.m = 1; a.a = A; a.q = Q; a.y = Y; a.scales = s;
    a.n = 12; a.k = 32; a.mode = FEATHER_SCALE_NONE;
    CHECK(feather_gemm(NULL, FEATHER_DEVICE_CPU, &a, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "multiple of 8");
    a.n = 8; a.k = 40;
    CHECK(feather_gemm(NULL, FEATHER_DEVICE_CPU, &a, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "multiple of 16");
    a.k = 96; a.mode = FEATHER_SCALE_BLOCK; a.group = 64;
    CHECK(feather_gemm(NULL, FEATHER_DEVICE_CPU, &a, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "block group 64");
    a.group = 24;
    CHECK(feather_gemm(NULL, FEATHER_DEVICE_CPU, &a, &err) == FEATHER_E_ARG);
    a.group = 32; a.scales = NULL;
    CHECK(feather_gemm(NULL, FEATHER_DEVICE_CPU, &a, &err) == FEATHER_E_ARG);
    CHECK(feather_gemm_supported(4096, 4096, FEATHER_SCALE_BLOCK, 128));
    CHECK(feather_gemm_supported(8, 16, FEATHER_SCALE_TENSOR, 0));
    CHECK(!feather_gemm_supported(2048, 68, FEATHER_SCALE_TENSOR, 0));
    CHECK(!feather_gemm_supported(4, 64, FEATHER_SCALE_TENSOR, 0));
    CHECK(!feather_gemm_supported(64, 96, FEATHER_SCALE_BLOCK, 64));
}

TEST(gemm_device_names_and_selection) {
    feather_device d;
    feather_error err;
    CHECK(feather_device_parse("gpu", &d, NULL) == FEATHER_OK && d == FEATHER_DEVICE_GPU);
    CHECK(feather_device_parse("cpu", &d, NULL) == FEATHER_OK && d == FEATHER_DEVICE_CPU);
    CHECK(feather_device_parse("auto", &d, NULL) == FEATHER_OK && d == FEATHER_DEVICE_AUTO);
    CHECK(feather_device_parse("cuda", &d, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "auto, cpu or gpu");
    CHECK(!strcmp(feather_device_name(FEATHER_DEVICE_GPU), "gpu"));

    char desc[256], why[256];
    int have = feather_gpu_available(desc, sizeof desc);
    CHECK(desc[0] != 0);
    int fell = -1;
    CHECK(feather_device_select(FEATHER_DEVICE_AUTO, &d, &fell, why, sizeof why, NULL) == FEATHER_OK);
    CHECK(d == (have ? FEATHER_DEVICE_GPU : FEATHER_DEVICE_CPU));
    CHECK(fell == !have);
    CHECK(feather_device_select(FEATHER_DEVICE_CPU, &d, &fell, why, sizeof why, NULL) == FEATHER_OK);
    CHECK(d == FEATHER_DEVICE_CPU && fell == 0);
    feather_status st = feather_device_select(FEATHER_DEVICE_GPU, &d, &fell, why, sizeof why, &err);
    if (have) {
        CHECK(st == FEATHER_OK && d == FEATHER_DEVICE_GPU);
    } else {
        CHECK(st == FEATHER_E_UNSUPPORTED);
        CHECK_STR_CONTAINS(err.message, "no usable GPU");
        /* and the product itself refuses the GPU but runs on AUTO */
        problem p;
        seed_once();
        problem_make(NULL, &p, 3, 16, 32, FEATHER_SCALE_TENSOR, 0, 0, 0);
        CHECK(feather_gemm(NULL, FEATHER_DEVICE_GPU, &p.args, &err) == FEATHER_E_UNSUPPORTED);
        run_case(NULL, FEATHER_DEVICE_AUTO, &p, "auto without GPU");
        problem_free(&p);
    }
}

/* ---- GPU ---- */
TEST(gemm_gpu_matches_fp64_every_mode_and_shape) {
    if (!tu_gpu_or_skip("GPU matrix-product tests")) return;
    seed_once();
    feather_ctx *ctx = feather_ctx_new(0);
    REQUIRE(ctx);
    /* (N, K): small and ragged panels, long K (split K in the skinny and tiled kernels), model
     * shapes (on 119–132 multiprocessors, N = 3072 and 8192 make one wave of the skinny kernel's
     * 24- and 64-column tiles, its blocks of 12–24 warps, and on 128–142 N = 12288 one of its
     * 48-column tiles, two blocks of 6 warps per multiprocessor, 8 with the operands swapped
     * (M ≤ 8); at N = 3072 K = 3072, 4096 and 6144 take its 12-, 21- and 24-warp forms, the
     * swapped ones with the warps' super-steps dealt out in turn; N = 9216, K = 3072 at M ≤ 8
     * its 32-column 4-warp blocks swapped, 7 per multiprocessor) */
    static const uint64_t shapes[][2] = {{64, 128},    {40, 96},     {1032, 96},   {264, 512},  {128, 4096},
                                         {64, 8192},   {3072, 3072}, {3072, 4096}, {3072, 6144}, {8192, 512},
                                         {12288, 256}, {9216, 3072}};
    static const uint64_t ms[] = {1, 7, 16, 24, 33, 128, 1000};
    double worst[2] = {0, 0};
    int cases = 0, failed = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
            for (size_t c = 0; c < NMODES; c++) {
                const uint64_t n = shapes[si][0], k = shapes[si][1], m = ms[mi];
                if (!feather_gemm_supported(n, k, MODES[c].mode, MODES[c].group)) continue;
                if (m * n < MIN_OUTPUTS) continue;
                if (m * n * k > 600000000u) continue; /* keep the fp64 reference quick */
                for (int bf16 = 0; bf16 <= 1; bf16++) {
                    problem p;
                    problem_make(ctx, &p, m, n, k, MODES[c].mode, MODES[c].group, (int)((mi + c + bf16) % 2), bf16);
                    failed += run_case(NULL, FEATHER_DEVICE_GPU, &p, "gpu");
                    double e = rel_error(&p);
                    if (e > worst[bf16]) worst[bf16] = e;
                    cases++;
                    problem_free(&p);
                }
            }
    /* A long K under few 128×128 tiles: on Hopper the stream-K kernel, which splits tiles
     * between blocks (beyond the size limit above: the reference runs on every core) */
    for (size_t c = 0; c < NMODES; c++) {
        if (MODES[c].mode == FEATHER_SCALE_BLOCK) continue;
        problem p;
        problem_make(ctx, &p, 600, 256, 8192, MODES[c].mode, MODES[c].group, (int)(c % 2), (int)(c % 2));
        failed += run_case(NULL, FEATHER_DEVICE_GPU, &p, "gpu, split tiles");
        double e = rel_error(&p);
        if (e > worst[c % 2]) worst[c % 2] = e;
        cases++;
        problem_free(&p);
    }
    /* Block scales on the kernels that keep their sum in units of the current group's scale (on
     * Hopper: 192 × 128 tiles at N = 3072, M = 1000; 128 × 256 tiles at N = 8192, M = 1000, and
     * split between blocks at N = 3072, K = 8192, M = 512; the two-warpgroup kernels' two sets,
     * whole 128 × 64 and 128 × 128 tiles at N = 3072, K = 1152 (two passes of 8 chunks and a
     * pair), M = 320 and 512, and split between blocks at M = 128 (K = 1152) and M = 96 (K =
     * 8192); on NVIDIA, M = 16, and M = 7 and 1 with the product's operands swapped: the skinny
     * kernel's 24-column tiles at N = 3072, K = 6144, its 64-column tiles at N = 8192 on 119–132
     * multiprocessors and its 48-column tiles at N = 12288 on 128–142; its 4-warp blocks of 32 and
     * 64 columns at N = 4096 and 6144; with groups of 32, warps' runs of K too long for their
     * scales' window in shared memory at N = 4096, K = 20480 and N = 8192, K = 8192, so that each
     * group's scales come from global memory; M = 17–32: the M ≤ 32 kernel's earlier order at
     * N = 3072, K = 3072, its later order at 4 blocks per multiprocessor at N = 8192, K = 1024 and
     * at 3 at N = 9216, K = 1024, and with groups of 32 at N = 8192, K = 2048), also with
     * neighbouring groups' scales 2^36 apart
     * (ratios near the rule's limit in every close). Then one scale 0 and the rest 2^42 apart,
     * which those kernels must not take (a division by 0, and units that could overflow): the same
     * shapes on the kernels with the exact close (a second set for each group's sum). */
    static const char *const spreads[] = {"gpu, block scales in units of the group's", "gpu, block scales 2^36 apart",
                                          "gpu, block scales far apart"};
    /* M, N, K, the group and the kernel each shape is here for (the pick's rule counts waves on
     * 132 SMs) */
    static const struct {
        uint64_t m, n, k;
        int group, kernel;
    } rs_shapes[] = {{1000, 3072, 512, 128, FK_VARIANT_WS192}, {1000, 8192, 512, 128, FK_VARIANT_WS256},
                     {512, 3072, 8192, 128, FK_VARIANT_SK256},  {320, 3072, 1152, 128, FK_VARIANT_WS64},
                     {512, 3072, 1152, 128, FK_VARIANT_WS128},  {128, 3072, 1152, 128, FK_VARIANT_SK64},
                     {96, 3072, 8192, 128, FK_VARIANT_SK128},   {16, 3072, 6144, 128, FK_VARIANT_SKINNY16},
                     {16, 8192, 512, 128, FK_VARIANT_SKINNY16}, {7, 3072, 6144, 128, FK_VARIANT_SKINNY16},
                     {1, 8192, 512, 128, FK_VARIANT_SKINNY16},  {16, 12288, 512, 128, FK_VARIANT_SKINNY16},
                     {1, 12288, 512, 128, FK_VARIANT_SKINNY16}, {7, 4096, 1024, 128, FK_VARIANT_SKINNY16},
                     {1, 6144, 4096, 128, FK_VARIANT_SKINNY16}, {16, 4096, 1024, 128, FK_VARIANT_SKINNY16},
                     {16, 6144, 4096, 128, FK_VARIANT_SKINNY16}, {16, 4096, 20480, 32, FK_VARIANT_SKINNY16},
                     {1, 8192, 8192, 32, FK_VARIANT_SKINNY16},  {24, 3072, 3072, 128, FK_VARIANT_SKINNY32},
                     {32, 8192, 1024, 128, FK_VARIANT_SKINNY32}, {17, 9216, 1024, 128, FK_VARIANT_SKINNY32},
                     {24, 8192, 2048, 32, FK_VARIANT_SKINNY32}};
#ifdef FEATHER_GPU
    const int hopper = tu_gpu_hopper(132);
#endif
    for (size_t si = 0; si < sizeof rs_shapes / sizeof rs_shapes[0]; si++)
        for (int wide = 0; wide <= 2; wide++) {
            const uint64_t m = rs_shapes[si].m, n = rs_shapes[si].n, k = rs_shapes[si].k;
            const int group = rs_shapes[si].group;
#ifdef FEATHER_GPU
            if (hopper && wide == 0)
                CHECK(fk_gemm_pick((int64_t)m, (int64_t)n, (int64_t)k, FK_SCALE_BLOCK_RS, group) == rs_shapes[si].kernel);
#endif
            problem p;
            problem_make(ctx, &p, m, n, k, FEATHER_SCALE_BLOCK, group, 1, 1);
            const uint64_t ns = n * (k / (uint64_t)group);
            if (wide == 1)
                for (uint64_t i = 0; i < ns; i++) p.scales[i] *= (i % 2) ? 0x1p-18f : 0x1p18f;
            if (wide == 2) {
                for (uint64_t i = 0; i < ns; i++) p.scales[i] *= (i % 2) ? 0x1p-32f : 0x1p10f;
                p.scales[ns / 2] = 0.0f;
            }
            if (wide) feather_parallel_for(ctx, n, 8, reference_rows, &p);
            CHECK(feather_block_scales_rescalable(p.scales, ns) == (wide < 2));
            failed += run_case(NULL, FEATHER_DEVICE_GPU, &p, spreads[wide]);
            double e = rel_error(&p);
            if (e > worst[1]) worst[1] = e;
            cases++;
            problem_free(&p);
        }
    printf("    %d GPU cases, %d failed; worst relative error: fp16 %.3g, bf16 %.3g\n", cases, failed,
           worst[0], worst[1]);
    feather_gpu_release();
    feather_ctx_free(ctx);
}

/* Products back to back on one stream, each one's input the previous one's output, nothing
 * synchronised between them: where the GPU has programmatic dependent launch the kernels
 * overlap, and one that read its input before the previous kernel finished would see the NaN
 * every buffer starts with. Against the same chain on the CPU (fp16 between layers). M from 1
 * to 1024: the skinny, stream-K and whole-tile kernels all launch that way on Hopper. */
TEST(gemm_gpu_back_to_back_chain) {
#ifndef FEATHER_GPU
    test_skip("*** GPU back-to-back chain NOT RUN: built without a GPU backend ***");
#else
    if (!tu_gpu_or_skip("GPU back-to-back chain")) return;
    seed_once();
    enum { LAYERS = 6 };
    const uint64_t n = 2048, ms[] = {1, 16, 300, 1024};
    feather_ctx *ctx = feather_ctx_new(0);
    REQUIRE(ctx);
    uint8_t *q = malloc(n * n), *packed = malloc(n * n);
    REQUIRE(q && packed);
    for (uint64_t i = 0; i < n * n; i++) q[i] = feather_f32_to_e5m2((float)(rng_normal() * 8.0));
    feather_pack(q, n, n, packed);
    const float scale = (float)(1.0 / (8.0 * sqrt((double)n))); /* keeps every layer's output ~N(0, 1) */
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        const uint64_t m = ms[mi];
        uint16_t *x[LAYERS + 1], *got = malloc(m * n * 2);
        void *dx[LAYERS + 1] = {0}, *dq = NULL, *ds = NULL, *dws = NULL;
        for (int l = 0; l <= LAYERS; l++) x[l] = malloc(m * n * 2);
        for (uint64_t i = 0; i < m * n; i++) x[0][i] = feather_f32_to_f16((float)rng_normal());
        feather_error err;
        for (int l = 0; l < LAYERS; l++) {
            feather_gemm_args a = {.m = m, .n = n, .k = n, .a = x[l], .q = packed, .scales = &scale,
                                   .mode = FEATHER_SCALE_TENSOR, .y = x[l + 1]};
            CHECK(feather_gemm(ctx, FEATHER_DEVICE_CPU, &a, &err) == FEATHER_OK);
        }
        const size_t wsb = fk_gemm_workspace((int64_t)m, (int64_t)n, (int64_t)n, FK_SCALE_TENSOR, 0, FK_VARIANT_AUTO);
        int rc = fk_malloc(&dq, n * n) || fk_malloc(&ds, sizeof scale) || fk_malloc(&dws, wsb + 16) ||
                 fk_memset(dws, 0, wsb + 16) || fk_to_device(dq, packed, n * n) || fk_to_device(ds, &scale, sizeof scale);
        for (int l = 0; l <= LAYERS && !rc; l++)
            rc = fk_malloc(&dx[l], m * n * 2) || (l ? fk_memset(dx[l], 0xff, m * n * 2) : fk_to_device(dx[0], x[0], m * n * 2));
        for (int l = 0; l < LAYERS && !rc; l++)
            rc = fk_gemm((int64_t)m, (int64_t)n, (int64_t)n, dx[l], dq, ds, FK_SCALE_TENSOR, 0, NULL, 0, dx[l + 1], dws,
                         wsb + 16, FK_VARIANT_AUTO, NULL);
        rc = rc || fk_synchronize() || fk_to_host(got, dx[LAYERS], m * n * 2);
        CHECK(rc == 0);
        double e = 0, r = 0;
        for (uint64_t i = 0; i < m * n; i++) {
            double g = feather_f16_to_f32(got[i]), c = feather_f16_to_f32(x[LAYERS][i]);
            e += isfinite(g) ? (g - c) * (g - c) : INFINITY;
            r += c * c;
        }
        const double rel = sqrt(e / r);
        printf("    back to back, M=%llu, %d layers of %llux%llu: relative difference to the CPU %.3g\n",
               (unsigned long long)m, LAYERS, (unsigned long long)n, (unsigned long long)n, rel);
        CHECK(rel <= 5e-3);
        for (int l = 0; l <= LAYERS; l++) {
            fk_free(dx[l]);
            free(x[l]);
        }
        fk_free(dq);
        fk_free(ds);
        fk_free(dws);
        free(got);
    }
    free(q);
    free(packed);
    feather_ctx_free(ctx);
#endif
}

#ifdef FEATHER_GPU
/* Variants first…last (FK_VARIANT_AUTO is 0) through the kernels' entry point, on each shape
 * {M, N, K} with channel scales and bias, and block scales (64 and 128) where K allows, half of
 * them into an output that is not 16-byte aligned: against the fp64 reference. A variant
 * answers "invalid value" only where it cannot apply (the skinny kernels above their M, the
 * Hopper kernels elsewhere than compute capability 9.0); anywhere else that is a failure.
 * desc gets the GPU's description; adds to *ran and returns the failures. */
static int variant_runs(char desc[256], const uint64_t (*shapes)[3], size_t nshapes, int first, int last, int *ran) {
    (void)feather_gpu_available(desc, 256);
    seed_once();
    feather_ctx *ctx = feather_ctx_new(0);
    if (!ctx) {
        test_fail(__FILE__, __LINE__, "feather_ctx_new failed");
        return 1;
    }
    const int hopper = tu_gpu_hopper(0);
    /* block:128 as well as 64: split tiles of the stream-K variants then begin and end inside groups */
    static const mode_case modes[] = {{FEATHER_SCALE_CHANNEL, 0}, {FEATHER_SCALE_BLOCK, 64}, {FEATHER_SCALE_BLOCK, 128}};
    int failed = 0;
    for (size_t si = 0; si < nshapes; si++)
        for (size_t c = 0; c < sizeof modes / sizeof modes[0]; c++) {
            const uint64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
            const int block = modes[c].mode == FEATHER_SCALE_BLOCK, g = (int)modes[c].group;
            if (block && k % g) continue;
            problem p;
            problem_make(ctx, &p, m, n, k, modes[c].mode, modes[c].group, 1, (int)(si % 2));
            const size_t ss = (block ? n * (k / g) : n) * sizeof(float);
            void *da = NULL, *dq = NULL, *ds = NULL, *db = NULL, *dy = NULL;
            int rc = fk_malloc(&da, m * k * 2) || fk_malloc(&dq, n * k) || fk_malloc(&ds, ss) || fk_malloc(&db, n * 2) ||
                     fk_malloc(&dy, m * n * 2 + 16) || fk_to_device(da, p.a, m * k * 2) || fk_to_device(dq, p.packed, n * k) ||
                     fk_to_device(ds, p.scales, ss) || fk_to_device(db, p.bias, n * 2);
            CHECK(rc == 0);
            for (int v = first; v <= last && !rc; v++) {
                /* block:128 as checked scales (FK_SCALE_BLOCK_RS: the wgmma kernels keep their sums
                 * in units of the current group's scale), block:64 as plain ones (the exact
                 * close) */
                const int kind = !block ? FK_SCALE_CHANNEL : g == 128 ? FK_SCALE_BLOCK_RS : FK_SCALE_BLOCK;
                const int applies = v == FK_VARIANT_AUTO       ? 1
                                    : v == FK_VARIANT_SKINNY16 ? m <= 16
                                    : v == FK_VARIANT_SKINNY32 ? m <= 32
                                    : v <= FK_VARIANT_TILE256  ? 1
                                                               : hopper;
                const size_t wsb = fk_gemm_workspace((int64_t)m, (int64_t)n, (int64_t)k, kind, g, v) + 16;
                void *dws = NULL;
                /* every other shape writes a Y that is 4-byte (the kernels store pairs of columns)
                 * but not 16-byte aligned */
                uint16_t *y = (uint16_t *)dy + 2 * (si % 2);
                int r = fk_malloc(&dws, wsb) || fk_memset(dws, 0, wsb) || fk_memset(dy, 0xff, m * n * 2 + 16);
                CHECK(r == 0);
                if (!r) r = fk_gemm((int64_t)m, (int64_t)n, (int64_t)k, da, dq, ds, kind, g, db, p.args.out_bf16, y, dws,
                                    wsb, v, NULL);
                if (!r) r = fk_synchronize();
                fk_free(dws);
                char mb[32];
                if (!applies) {
                    if (!r) {
                        test_fail(__FILE__, __LINE__, "variant %d ran at M=%llu on %s, where it cannot apply", v,
                                  (unsigned long long)m, desc);
                        failed++;
                    }
                    continue;
                }
                if (r || fk_to_host(p.y, y, m * n * 2)) {
                    test_fail(__FILE__, __LINE__, "variant %d M=%llu N=%llu K=%llu %s: %s", v, (unsigned long long)m,
                              (unsigned long long)n, (unsigned long long)k, mode_str(p.args.mode, p.args.group, mb),
                              fk_error_string(r));
                    failed++;
                    continue;
                }
                (*ran)++;
                const double e = rel_error(&p), tol = tolerance(p.args.out_bf16);
                if (!(e <= tol)) {
                    test_fail(__FILE__, __LINE__, "variant %d M=%llu N=%llu K=%llu %s %s +bias: relative error %.3g > %.1g", v,
                              (unsigned long long)m, (unsigned long long)n, (unsigned long long)k,
                              mode_str(p.args.mode, p.args.group, mb), p.args.out_bf16 ? "bf16" : "fp16", e, tol);
                    failed++;
                }
            }
            fk_free(da);
            fk_free(dq);
            fk_free(ds);
            fk_free(db);
            fk_free(dy);
            problem_free(&p);
        }
    feather_ctx_free(ctx);
    return failed;
}
#endif

/* Every kernel variant, not only those the library picks, on ragged shapes (partial tiles in M
 * and N, K not a whole number of 64-k chunks). */
TEST(gemm_gpu_every_variant) {
#ifndef FEATHER_GPU
    test_skip("*** GPU variant tests NOT RUN: built without a GPU backend ***");
#else
    if (!tu_gpu_or_skip("GPU variant tests")) return;
    static const uint64_t shapes[][3] = {{1, 1000, 512}, {16, 1000, 1008}, {300, 1000, 576}, {1000, 520, 1024}};
    char desc[256];
    int ran = 0;
    const int failed = variant_runs(desc, shapes, sizeof shapes / sizeof shapes[0], 1, FK_VARIANT_COUNT - 1, &ran);
    printf("    %d variant runs on %s, %d failed\n", ran, desc, failed);
    feather_gpu_release();
#endif
}

/* As on a GPU with the least shared memory per block of those the build is for
 * (fk_shared_memory_floor: gfx11's 64 KiB, the 99 KiB of NVIDIA's sm_86, sm_89 and sm_120): the
 * library's pick and every variant but the wgmma ones still run, the tiled kernels with fewer
 * stages where theirs do not fit, and on Hopper the pick's wgmma kernel gives way to a tiled
 * one. The shapes include those that take the skinny kernel's one-wave forms on 119–132
 * multiprocessors with either fragment layer (N = 3072, 8192 and 12288 with NVIDIA's 8-column
 * fragments; 6144 and 16384 with gfx11's 16-column ones, here in the WMMA-emulated build). */
TEST(gemm_gpu_within_the_least_shared_memory) {
#ifndef FEATHER_GPU
    test_skip("*** GPU shared-memory limit tests NOT RUN: built without a GPU backend ***");
#else
    if (!tu_gpu_or_skip("GPU shared-memory limit tests")) return;
    static const uint64_t shapes[][3] = {{16, 3072, 4096}, {1, 8192, 512},    {16, 12288, 256}, {16, 6144, 4096},
                                         {1, 16384, 256},  {300, 1000, 576}, {1000, 520, 1024}};
    const size_t floor_bytes = fk_shared_memory_floor();
    fk_limit_shared_memory(floor_bytes);
    if (tu_gpu_hopper(0)) {
        /* the pick at M = 1000 is a wgmma kernel, which cannot run within the floor */
        const int v = fk_gemm_pick(1000, 520, 1024, FK_SCALE_CHANNEL, 0);
        const size_t wsb = fk_gemm_workspace(1000, 520, 1024, FK_SCALE_CHANNEL, 0, v);
        void *dws = NULL;
        CHECK(v >= FK_VARIANT_WS128);
        /* refused before anything is launched (so no operands are needed); CHECK, not REQUIRE,
         * which would leave the test with the limit still set */
        const int ok = fk_malloc(&dws, wsb) == 0 && fk_memset(dws, 0, wsb) == 0;
        CHECK(ok);
        const int r =
            ok ? fk_gemm(1000, 520, 1024, NULL, NULL, NULL, FK_SCALE_CHANNEL, 0, NULL, 0, NULL, dws, wsb, v, NULL) : 0;
        CHECK(r != 0 && strstr(fk_error_string(r), "not supported"));
        fk_free(dws);
    }
    char desc[256];
    int ran = 0;
    const int failed =
        variant_runs(desc, shapes, sizeof shapes / sizeof shapes[0], FK_VARIANT_AUTO, FK_VARIANT_TILE256, &ran);
    fk_limit_shared_memory(0);
    printf("    %d runs within %zu KiB of shared memory per block on %s, %d failed\n", ran, floor_bytes / 1024, desc,
           failed);
    feather_gpu_release();
#endif
}

/* The kernels' entry point refuses pointers its loads and stores cannot use (A and Q not
 * 16-byte aligned, Y not 4-byte, scales and bias not naturally aligned) with an error and
 * nothing written, at an M for the skinny kernels and one for the tiled or wgmma ones; the same
 * call with aligned pointers runs. */
TEST(gemm_gpu_rejects_misaligned_pointers) {
#ifndef FEATHER_GPU
    test_skip("*** GPU alignment checks NOT RUN: built without a GPU backend ***");
#else
    if (!tu_gpu_or_skip("GPU alignment checks")) return;
    enum { N = 256, K = 256, MMAX = 300 };
    unsigned char *da = NULL, *dq = NULL, *ds = NULL, *db = NULL, *dy = NULL, *dws = NULL;
    uint16_t *host = malloc((size_t)MMAX * N * 2);
    REQUIRE(host);
    const size_t wsb = 64 << 20;
    int rc = fk_malloc((void **)&da, (size_t)MMAX * K * 2 + 16) || fk_malloc((void **)&dq, (size_t)N * K + 16) ||
             fk_malloc((void **)&ds, N * 4 + 16) || fk_malloc((void **)&db, N * 2 + 16) ||
             fk_malloc((void **)&dy, (size_t)MMAX * N * 2 + 16) || fk_malloc((void **)&dws, wsb) ||
             fk_memset(da, 0, (size_t)MMAX * K * 2 + 16) || fk_memset(dq, 0, (size_t)N * K + 16) ||
             fk_memset(ds, 0, N * 4 + 16) || fk_memset(db, 0, N * 2 + 16) || fk_memset(dws, 0, wsb);
    REQUIRE(rc == 0);
    static const int ms[] = {16, MMAX};
    /* offsets in bytes of a, q, y, scales, bias; the first set is aligned */
    static const int offs[][5] = {{0, 0, 0, 0, 0}, {8, 0, 0, 0, 0}, {0, 8, 0, 0, 0}, {0, 0, 2, 0, 0},
                                  {0, 0, 0, 2, 0}, {0, 0, 0, 0, 1}};
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
        for (size_t o = 0; o < sizeof offs / sizeof offs[0]; o++) {
            const int m = ms[mi];
            REQUIRE(fk_memset(dy, 0xff, (size_t)MMAX * N * 2 + 16) == 0);
            int r = fk_gemm(m, N, K, da + offs[o][0], dq + offs[o][1], (const float *)(ds + offs[o][3]),
                            FK_SCALE_CHANNEL, 0, db + offs[o][4], 0, dy + offs[o][2], dws, wsb, FK_VARIANT_AUTO, NULL);
            if (!r) r = fk_synchronize();
            REQUIRE(fk_to_host(host, dy + offs[o][2], (size_t)m * N * 2) == 0);
            int poisoned = 1; /* every output still the 0xffff written before */
            for (size_t i = 0; i < (size_t)m * N; i++) poisoned &= host[i] == 0xffff;
            if (o == 0) {
                /* zero weights and scales: every output is +0 */
                if (r) test_fail(__FILE__, __LINE__, "M=%d, aligned: %s", m, fk_error_string(r));
                CHECK(host[0] == 0 && host[(size_t)m * N - 1] == 0);
            } else {
                if (!r || !poisoned)
                    test_fail(__FILE__, __LINE__, "M=%d, offsets a %d q %d y %d scales %d bias %d: rc %d, output %s", m,
                              offs[o][0], offs[o][1], offs[o][2], offs[o][3], offs[o][4], r,
                              poisoned ? "untouched" : "written");
            }
        }
    fk_free(da);
    fk_free(dq);
    fk_free(ds);
    fk_free(db);
    fk_free(dy);
    fk_free(dws);
    free(host);
#endif
}

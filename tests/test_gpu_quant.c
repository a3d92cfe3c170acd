/* GPU quantisation (src/gpu_quant.c, kernels/quant.hip, kernels/quant_hd.h).
 *
 * Without a GPU: the arithmetic the kernels are written with (quant_hd.h) runs here on the
 * CPU, first function by function against the library's own (rounding, cast, decode, tree),
 * then assembled the way the kernels assemble it (a team of 16 lanes per group, the exchange
 * tree, the histogram handed to the host, the per-row statistics lanes) into a model of the
 * whole GPU path whose bytes must equal feather_quantize's for every mode, format, dtype,
 * layout, importance and a set of adversarial weights.
 * With a GPU: feather_quantize_on(GPU) against feather_quantize on the same cases, with tiny
 * and default pipeline chunks and page-locked buffers; the converter end to end (--device cpu
 * and gpu give identical files). Without one those skip loudly; what runs instead is the
 * refusal of --device gpu (exit 2, nothing written) and the fallback of --device auto. */
#include "test.h"
#include "testutil.h"
#include "feather/feather.h"

#include "../kernels/quant_hd.h"
#include "gpu_host.h"
#include "scale_internal.h"

#include <math.h>
#include <stdlib.h>
#include <dirent.h>
#include <sys/stat.h>

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---------------------------------------------------------------- element arithmetic ---- */

TEST(gpu_quant_hd_round_matches_scale_round) {
    uint64_t s = 11;
    int bad = 0;
    for (int e4 = 0; e4 < 2; e4++) {
        scale_fmt sf = scale_fmt_of(e4 ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2);
        fkq_fmt f = fkq_fmt_of(e4);
        CHECK(f.emin == sf.emin && f.off == sf.off && f.max == sf.max);
        /* every exponent with edge mantissas, then random patterns below 2^20 */
        for (uint32_t ex = 0; ex < 0x94; ex++)
            for (uint32_t m = 0; m < 64; m++) {
                uint32_t mant = m < 32 ? m : (0x7fffffu - (m - 32)) ^ ((m & 1) << 22);
                float x = u2f(ex << 23 | (mant & 0x7fffffu));
                bad += f2u(fkq_round(x, f)) != f2u(feather_scale_round(x, sf));
            }
        for (int i = 0; i < 2000000; i++) {
            float x = u2f((uint32_t)tu_rand(&s) % 0x49800000u);
            bad += f2u(fkq_round(x, f)) != f2u(feather_scale_round(x, sf));
        }
    }
    CHECK_EQ_U(bad, 0);
}

TEST(gpu_quant_hd_cast_matches_codec) {
    /* every pattern of the top 20 bits with the low 12 bits at the rounding edges (ties,
     * just above, just below) and one random value */
    uint64_t s = 5;
    const uint32_t lows[] = {0, 1, 0x7ff, 0x800, 0x801, 0xfff, 0x3ff, 0x400, 0x401};
    int bad = 0;
    for (int e4 = 0; e4 < 2; e4++)
        for (uint32_t hi = 0; hi < (1u << 20); hi++)
            for (size_t l = 0; l <= sizeof lows / sizeof lows[0]; l++) {
                uint32_t low = l < sizeof lows / sizeof lows[0] ? lows[l] : (uint32_t)tu_rand(&s) & 0xfff;
                float x = u2f(hi << 12 | low);
                uint8_t want = feather_f32_to_fp8(x, e4 ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2);
                bad += fkq_encode(x, e4) != want;
            }
    CHECK_EQ_U(bad, 0);
    /* the scaled cast is one multiply before it */
    for (int i = 0; i < 100000; i++) {
        float w = u2f((uint32_t)tu_rand(&s)), inv = u2f(0x30000000u + (uint32_t)tu_rand(&s) % 0x1e000000u);
        bad += fkq_cast(w, inv, i & 1) != feather_f32_to_fp8(w * inv, (i & 1) ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2);
    }
    CHECK_EQ_U(bad, 0);
}

TEST(gpu_quant_hd_loads_and_decode_are_exact) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t v = (uint16_t)h;
        bad += f2u(fkq_load(FKQ_F16, &v, 0)) != f2u(feather_f16_to_f32(v));
        bad += f2u(fkq_load(FKQ_BF16, &v, 0)) != f2u(feather_bf16_to_f32(v));
        float w = fkq_load(FKQ_F16, &v, 0);
        uint32_t mag = f2u(w) & 0x7fffffffu;
        bad += f2u(fkq_mag(w)) != (mag >= 0x7f800000u ? 0u : mag);
        bad += fkq_nonfinite(w) != ((h & 0x7c00) == 0x7c00);
    }
    for (int q = 0; q < 256; q++)
        for (int e4 = 0; e4 < 2; e4++)
            bad += f2u(fkq_decode((uint8_t)q, e4)) !=
                   f2u(feather_fp8_to_f32((uint8_t)q, e4 ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2));
    CHECK_EQ_U(bad, 0);
}

/* The kernels' exchange tree: 16 threads, each adding the value of the thread whose lane
 * differs in bit 3, 2, 1, 0 (one fkq_add per step). */
static float butterfly(const float L[16], int *agree) {
    float v[16], t[16];
    memcpy(v, L, sizeof v);
    for (int m = 8; m; m >>= 1) {
        for (int l = 0; l < 16; l++) t[l] = fkq_add(v[l], v[l ^ m]);
        memcpy(v, t, sizeof v);
    }
    *agree = 1;
    for (int l = 1; l < 16; l++) *agree &= f2u(v[l]) == f2u(v[0]);
    return v[0];
}

TEST(gpu_quant_hd_exchange_tree_is_the_lane_tree) {
    uint64_t s = 3;
    int bad = 0, split = 0;
    for (int i = 0; i < 200000; i++) {
        float L[16];
        for (int l = 0; l < 16; l++) /* sums of errors: non-negative, wide exponents */
            L[l] = (tu_rand(&s) & 7) ? u2f((uint32_t)(tu_rand(&s) % 0x7f000000u)) : 0.0f;
        int agree;
        float b = butterfly(L, &agree);
        split += !agree;
        bad += f2u(b) != f2u(feather_scale_tree(L)) || f2u(b) != f2u(fkq_tree16(L));
    }
    CHECK_EQ_U(bad, 0);
    CHECK_EQ_U(split, 0); /* every thread ends with the same total */
}

/* A group's candidate totals as a team computes them (lane l: errors of elements l, l+16, …
 * in order; then the exchange tree) against the CPU's error kernels at every SIMD level: the
 * totals themselves, not only the scale they choose, which rarely depends on the last bit. */
TEST(gpu_quant_hd_team_totals_match_cpu_kernels) {
    uint64_t s = 17;
    int bad = 0, groups = 0;
    float a[1024], imp[1024], r[FEATHER_GRID_MAX], cs[FEATHER_GRID_MAX], ci[FEATHER_GRID_MAX];
    float tot[FEATHER_GRID_MAX], acc[16 * FEATHER_GRID_MAX];
    for (int iter = 0; iter < 400; iter++) {
        size_t len = 16 * (1 + tu_rand(&s) % 64);
        int e4 = iter & 1, wimp = (iter >> 1) & 1;
        unsigned nr = 1 + (unsigned)(tu_rand(&s) % 40);
        feather_grid_ratios(nr, r);
        float amax = 0;
        double sigma = pow(10.0, (double)(tu_rand(&s) % 60) - 30.0);
        for (size_t i = 0; i < len; i++) {
            a[i] = (tu_rand(&s) % 7) ? fabsf((float)(sigma * tu_normal(&s))) : 0.0f;
            imp[i] = (tu_rand(&s) % 5) ? (float)(tu_rand(&s) % 1000) / 100.0f : 0.0f;
            amax = a[i] > amax ? a[i] : amax;
        }
        fkq_fmt f = fkq_fmt_of(e4);
        float sa = fkq_sabs(amax, f);
        if (sa == 0) continue;
        for (unsigned j = 0; j < nr; j++) ci[j] = fkq_inv(cs[j] = fkq_cand_s(sa, r[j]));
        scale_fmt sf = scale_fmt_of(e4 ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2);
        for (int lv = 0; lv <= (int)feather_simd_detect(); lv++) {
            scale_kernels kn = feather_scale_kernels((feather_simd)lv);
            float ks[FEATHER_GRID_MAX], kinv[FEATHER_GRID_MAX];
            kn.cands(sa, r, nr, ks, kinv);
            for (unsigned j = 0; j < nr; j++) bad += f2u(ks[j]) != f2u(cs[j]) || f2u(kinv[j]) != f2u(ci[j]);
            memset(acc, 0, sizeof acc);
            kn.errors(a, wimp ? imp : NULL, len, ks, kinv, nr, sf, SCALE_CLAMP_LOW | SCALE_CLAMP_HIGH, acc, tot);
            for (unsigned j = 0; j < nr; j++) {
                float L[16];
                for (int l = 0; l < 16; l++) {
                    L[l] = 0.0f;
                    for (size_t i = (size_t)l; i < len; i += 16)
                        L[l] = fkq_add(L[l], wimp ? fkq_err_imp(a[i], cs[j], ci[j], imp[i], f) : fkq_err(a[i], cs[j], ci[j], f));
                }
                int agree;
                bad += f2u(butterfly(L, &agree)) != f2u(tot[j]);
            }
            groups++;
        }
    }
    CHECK(groups > 300);
    CHECK_EQ_U(bad, 0);
}

/* ---------------------------------------------------------------- test weights ---- */

enum { DATA_NORMAL, DATA_ADVERSARIAL, DATA_NONFINITE, DATA_KINDS };

static void put(feather_dtype dt, void *w, uint64_t i, float v) {
    if (dt == FEATHER_F32) ((float *)w)[i] = v;
    else if (dt == FEATHER_F16) ((uint16_t *)w)[i] = feather_f32_to_f16(v);
    else ((uint16_t *)w)[i] = feather_f32_to_bf16(v);
}

/* Weights of one kind. Adversarial: per run of 16 weights one of: all zero; subnormal inputs;
 * values at and near the format's saturation; magnitudes so small that a group's s_absmax
 * falls below 2^-124 (F32/BF16; F16 subnormals otherwise); a few powers of two (many exact
 * ties between candidates); one huge value among tiny ones; plain normal values. */
static void fill(feather_dtype dt, int kind, uint64_t seed, uint64_t n, uint64_t k, void *w) {
    uint64_t s = seed * 7919 + (uint64_t)kind * 131 + (uint64_t)dt;
    int f16 = dt == FEATHER_F16;
    for (uint64_t r = 0; r < n; r++) {
        double sigma = pow(10.0, -3.0 + 4.0 * (double)(tu_rand(&s) % 1000) / 1000.0);
        int pat = 0;
        for (uint64_t c = 0; c < k; c++) {
            uint64_t i = r * k + c;
            if (c % 16 == 0) pat = kind == DATA_ADVERSARIAL ? (int)(tu_rand(&s) % 8) : 7;
            float v = (float)(sigma * tu_normal(&s));
            switch (pat) {
            case 0: v = 0.0f; break;
            case 1: v = f16 ? (float)((int)(tu_rand(&s) % 2048) - 1024) * 0x1p-24f
                            : u2f((uint32_t)(tu_rand(&s) % 0x800000u) | (uint32_t)(tu_rand(&s) & 1) << 31);
                break;
            case 2: v = (tu_rand(&s) & 1 ? -1.0f : 1.0f) * (f16 ? 65504.0f - (float)(tu_rand(&s) % 64) * 32.0f
                                                                 : 3.0e38f * (float)(1.0 - (double)(tu_rand(&s) % 100) / 1000.0));
                break;
            case 3: v = f16 ? (float)(tu_rand(&s) % 4) * 0x1p-24f : (float)(tu_normal(&s) * 1e-36); break;
            case 4: v = (tu_rand(&s) & 1 ? -1.0f : 1.0f) * ldexpf(1.0f, (int)(tu_rand(&s) % 6) - 3); break;
            case 5: v = c % 16 == 3 ? 1000.0f : (float)(tu_normal(&s) * 1e-6); break;
            default: break;
            }
            put(dt, w, i, v);
            if (kind == DATA_NONFINITE && tu_rand(&s) % 97 == 0) {
                int which = (int)(tu_rand(&s) % 3);
                float nf = which == 0 ? NAN : which == 1 ? INFINITY : -INFINITY;
                put(dt, w, i, nf);
            }
        }
    }
}

/* Importance: random, with stretches of zeros (whole groups of zero importance tie every
 * candidate at 0; with huge F32 weights, Inf·0 makes NaN totals). */
static void fill_importance(uint64_t k, uint64_t seed, float *imp) {
    uint64_t s = seed * 31 + 7;
    for (uint64_t c = 0; c < k; c++) imp[c] = (float)(tu_rand(&s) % 1000) / 250.0f;
    for (uint64_t c = 0; c < k; c++)
        if ((c / 16) % 5 == 2) imp[c] = 0.0f;
}

/* ---------------------------------------------------------------- the GPU path, modelled ---- */

/* What kernels/quant.hip and src/gpu_quant.c compute, written with the same quant_hd.h calls in
 * the same order: lanes as loops, the exchange tree as butterfly(). */
typedef struct model_out {
    feather_status st;
    char msg[FEATHER_ERROR_MAX];
} model_out;

static feather_status model_quantize(const feather_quant_options *o, feather_dtype dtype, const void *w,
                                     uint64_t n, uint64_t k, int packed, uint8_t *q, float *scales,
                                     feather_quant_stats *stats, feather_error *err) {
    const int dt = dtype == FEATHER_F16 ? FKQ_F16 : dtype == FEATHER_BF16 ? FKQ_BF16 : FKQ_F32;
    const int e4 = o->format == FEATHER_FP8_E4M3FN;
    const fkq_fmt f = fkq_fmt_of(e4);
    const unsigned nr = o->mode == FEATHER_SCALE_ABSMAX ? 1 : feather_grid_size(o->grid);
    float r[FEATHER_GRID_MAX];
    feather_grid_ratios(nr, r);
    const float *imp = o->mode == FEATHER_SCALE_NONE || o->mode == FEATHER_SCALE_ABSMAX ? NULL : o->importance;
    const uint64_t G = o->mode == FEATHER_SCALE_BLOCK ? o->group : k, gpr = k / G;
    const int per_group = o->mode == FEATHER_SCALE_CHANNEL || o->mode == FEATHER_SCALE_BLOCK;
    uint64_t nf = 0;
    float one = 1.0f;
    char pre[300];
    feather_tensor_prefix(o->name, pre, sizeof pre);
    if (per_group) {
        for (uint64_t team = 0; team < n * gpr; team++) {
            uint64_t row = team / gpr, c0 = (team % gpr) * G, base = row * k + c0;
            float amax = 0.0f;
            for (uint64_t i = 0; i < G; i++) {
                float x = fkq_load(dt, w, (int64_t)(base + i));
                nf += (uint64_t)fkq_nonfinite(x);
                float a = fkq_mag(x);
                amax = a > amax ? a : amax;
            }
            float s = 1.0f, sa = fkq_sabs(amax, f);
            if (sa != 0.0f && nr == 1) s = sa;
            if (sa != 0.0f && nr > 1) {
                float best = 0.0f;
                unsigned bj = 0;
                for (unsigned j = 0; j < nr; j++) {
                    float cs = fkq_cand_s(sa, r[j]), ci = fkq_inv(cs), L[16];
                    for (int l = 0; l < 16; l++) {
                        L[l] = 0.0f;
                        for (uint64_t i = (uint64_t)l; i < G; i += 16) {
                            float a = fkq_mag(fkq_load(dt, w, (int64_t)(base + i)));
                            L[l] = fkq_add(L[l], imp ? fkq_err_imp(a, cs, ci, imp[c0 + i], f) : fkq_err(a, cs, ci, f));
                        }
                    }
                    int agree;
                    float t = butterfly(L, &agree);
                    if (j == 0 || fkq_better(t, best)) {
                        best = t;
                        bj = j;
                    }
                }
                s = fkq_cand_s(sa, r[bj]);
            }
            scales[team] = s;
        }
        if (nf && !o->allow_nonfinite)
            return feather_fail_nonfinite(err, pre, nf, "values");
    } else if (o->mode == FEATHER_SCALE_TENSOR && dt != FKQ_F32) {
        /* the histogram the GPU counts, finished by the host's own function */
        uint64_t *h = calloc(2 * 32768, sizeof *h);
        uint32_t *iq = imp ? malloc(k * sizeof *iq) : NULL;
        if (imp) feather_scale_impq(imp, k, iq);
        for (uint64_t i = 0; i < n * k; i++) {
            unsigned b = ((const uint16_t *)w)[i] & 0x7fffu;
            h[b]++;
            if (iq) h[32768 + b] += iq[i % k];
        }
        scale_kernels kn = feather_scale_kernels(FEATHER_SIMD_SCALAR);
        feather_status st = feather_scale_hist_pick(o, dtype, NULL, h, iq ? h + 32768 : NULL, r, nr, &kn, &one, NULL, err);
        free(h);
        free(iq);
        if (st) return st;
        scales[0] = one;
    } else if (o->mode == FEATHER_SCALE_TENSOR || o->mode == FEATHER_SCALE_ABSMAX) {
        float amax = 0.0f;
        for (uint64_t i = 0; i < n * k; i++) {
            float x = fkq_load(dt, w, (int64_t)i);
            nf += (uint64_t)fkq_nonfinite(x);
            amax = fkq_mag(x) > amax ? fkq_mag(x) : amax;
        }
        if (nf && !o->allow_nonfinite)
            return feather_fail_nonfinite(err, pre, nf, "values");
        float sa = fkq_sabs(amax, f);
        one = sa == 0.0f ? 1.0f : sa;
        if (sa != 0.0f && nr > 1) { /* F32 tensor: row totals (f32 lanes), summed over rows in double */
            double ob[FEATHER_GRID_MAX] = {0};
            float cs[FEATHER_GRID_MAX];
            for (unsigned j = 0; j < nr; j++) {
                cs[j] = fkq_cand_s(sa, r[j]);
                float ci = fkq_inv(cs[j]);
                for (uint64_t row = 0; row < n; row++) {
                    float L[16];
                    for (int l = 0; l < 16; l++) {
                        L[l] = 0.0f;
                        for (uint64_t i = (uint64_t)l; i < k; i += 16) {
                            float a = fkq_mag(fkq_load(dt, w, (int64_t)(row * k + i)));
                            L[l] = fkq_add(L[l], imp ? fkq_err_imp(a, cs[j], ci, imp[i], f) : fkq_err(a, cs[j], ci, f));
                        }
                    }
                    int agree;
                    ob[j] += (double)butterfly(L, &agree);
                }
            }
            one = cs[feather_scale_argmin_d(ob, nr)];
        }
        scales[0] = one;
    } else if (scales) {
        scales[0] = 1.0f;
    }
    /* the cast, and the statistics' lanes */
    nf = 0;
    feather_quant_stats t = {0};
    for (uint64_t row = 0; row < n; row++) {
        fkq_stat lanes[8] = {{0}};
        for (uint64_t c = 0; c < k; c++) {
            float s = per_group ? scales[row * gpr + c / G] : o->mode == FEATHER_SCALE_NONE ? 1.0f : one;
            float x = fkq_load(dt, w, (int64_t)(row * k + c));
            nf += (uint64_t)fkq_nonfinite(x);
            uint8_t code = fkq_cast(x, fkq_inv(s), e4);
            q[packed ? (c / 16) * 16 * n + 16 * row + c % 16 : row * k + c] = code;
            fkq_stat_add(&lanes[c % 8], x, s, fkq_decode(code, e4));
        }
        fkq_stat rt = {0, 0, 0};
        for (int l = 0; l < 8; l++) {
            rt.sum_sq = fkq_dadd(rt.sum_sq, lanes[l].sum_sq);
            rt.err_sq = fkq_dadd(rt.err_sq, lanes[l].err_sq);
            rt.max_err = lanes[l].max_err > rt.max_err ? lanes[l].max_err : rt.max_err;
        }
        t.sum_sq += rt.sum_sq;
        t.err_sq += rt.err_sq;
        if (rt.max_err > t.max_abs_err) t.max_abs_err = rt.max_err;
    }
    if (nf && !o->allow_nonfinite) /* only mode none gets here with them */
        return feather_fail_nonfinite(err, pre, nf, "values");
    t.nonfinite = nf;
    if (stats) *stats = t;
    return FEATHER_OK;
}

/* ---------------------------------------------------------------- the comparison ---- */

typedef feather_status (*quant_fn)(feather_ctx *ctx, const feather_quant_options *o, feather_dtype dt,
                                   const void *w, uint64_t n, uint64_t k, int packed, uint8_t *q, float *scales,
                                   feather_quant_stats *st, feather_error *err);

static feather_status via_model(feather_ctx *ctx, const feather_quant_options *o, feather_dtype dt, const void *w,
                                uint64_t n, uint64_t k, int packed, uint8_t *q, float *scales,
                                feather_quant_stats *st, feather_error *err) {
    (void)ctx;
    return model_quantize(o, dt, w, n, k, packed, q, scales, st, err);
}
static feather_status via_gpu(feather_ctx *ctx, const feather_quant_options *o, feather_dtype dt, const void *w,
                              uint64_t n, uint64_t k, int packed, uint8_t *q, float *scales,
                              feather_quant_stats *st, feather_error *err) {
    return feather_quantize_on(ctx, FEATHER_DEVICE_GPU, o, dt, w, n, k, packed, q, scales, st, err);
}

typedef struct tally {
    int cases, failed, refused, stats_exact;
    double worst_stat;
} tally;

static const char *mode_name(const feather_quant_options *o, char *b) {
    return feather_scale_format(o->mode, o->group, b, 32);
}

/* One case: the CPU (feather_quantize) against f, codes and scale bits, statistics closely.
 * qbuf/wbuf may be given (page-locked buffers); else plain allocations. */
static void compare(tally *t, quant_fn f, feather_ctx *ctx, const feather_quant_options *o, feather_dtype dt,
                    const void *w, uint64_t n, uint64_t k, int packed, uint8_t *qbuf, const char *what) {
    char mb[32];
    uint64_t ns = feather_scale_count(o, n, k);
    uint8_t *q0 = malloc(n * k + 1), *q1 = qbuf ? qbuf : malloc(n * k + 1);
    float *s0 = malloc(ns * 4 + 4), *s1 = malloc(ns * 4 + 4);
    feather_quant_stats a, b;
    feather_error e0 = {0}, e1 = {0};
    memset(&a, 0, sizeof a);
    memset(&b, 0xcd, sizeof b);
    feather_status r0 = feather_quantize(ctx, o, dt, w, n, k, packed, q0, s0, &a, &e0);
    feather_status r1 = f(ctx, o, dt, w, n, k, packed, q1, s1, &b, &e1);
    t->cases++;
    int bad = 0;
    if (r0 != r1) {
        printf("    %s %s %s %s packed=%d imp=%d %llux%llu: status %d vs %d (%s | %s)\n", what, feather_dtype_name(dt),
               feather_fp8_name(o->format), mode_name(o, mb), packed, o->importance != NULL, (unsigned long long)n,
               (unsigned long long)k, (int)r0, (int)r1, e0.message, e1.message);
        bad = 1;
    } else if (r0) {
        t->refused++;
        if (strcmp(e0.message, e1.message)) {
            printf("    %s: messages differ: '%s' vs '%s'\n", what, e0.message, e1.message);
            bad = 1;
        }
    } else {
        for (uint64_t i = 0; i < n * k && !bad; i++)
            if (q0[i] != q1[i]) {
                printf("    %s %s %s %s packed=%d imp=%d %llux%llu: code %llu: %02x vs %02x\n", what,
                       feather_dtype_name(dt), feather_fp8_name(o->format), mode_name(o, mb), packed,
                       o->importance != NULL, (unsigned long long)n, (unsigned long long)k, (unsigned long long)i,
                       q0[i], q1[i]);
                bad = 1;
            }
        for (uint64_t i = 0; i < ns && !bad; i++)
            if (f2u(s0[i]) != f2u(s1[i])) {
                printf("    %s %s %s %s imp=%d %llux%llu: scale %llu: %a vs %a\n", what, feather_dtype_name(dt),
                       feather_fp8_name(o->format), mode_name(o, mb), o->importance != NULL, (unsigned long long)n,
                       (unsigned long long)k, (unsigned long long)i, (double)s0[i], (double)s1[i]);
                bad = 1;
            }
        double d1 = fabs(a.sum_sq - b.sum_sq) / (a.sum_sq > 0 ? a.sum_sq : 1),
               d2 = fabs(a.err_sq - b.err_sq) / (a.err_sq > 0 ? a.err_sq : 1),
               d3 = fabs(a.max_abs_err - b.max_abs_err) / (a.max_abs_err > 0 ? a.max_abs_err : 1);
        double d = d1 > d2 ? d1 : d2;
        d = d > d3 ? d : d3;
        if (!(d <= 1e-12) || a.nonfinite != b.nonfinite) {
            printf("    %s %s %s: statistics differ (rel %.3g; nonfinite %llu vs %llu)\n", what, feather_dtype_name(dt),
                   mode_name(o, mb), d, (unsigned long long)a.nonfinite, (unsigned long long)b.nonfinite);
            bad = 1;
        }
        if (d > t->worst_stat) t->worst_stat = d;
        t->stats_exact += a.sum_sq == b.sum_sq && a.err_sq == b.err_sq && a.max_abs_err == b.max_abs_err;
    }
    t->failed += bad;
    free(q0);
    if (!qbuf) free(q1);
    free(s0);
    free(s1);
}

typedef struct shape {
    uint64_t n, k;
} shape;

/* Every mode, format, dtype, layout and importance over the shapes and data kinds given. */
static void sweep_cases(tally *t, quant_fn f, feather_ctx *ctx, const shape *shapes, size_t nsh, int kinds,
                        const char *what) {
    static const feather_scale_mode modes[] = {FEATHER_SCALE_NONE, FEATHER_SCALE_ABSMAX, FEATHER_SCALE_TENSOR,
                                               FEATHER_SCALE_CHANNEL, FEATHER_SCALE_BLOCK, FEATHER_SCALE_BLOCK,
                                               FEATHER_SCALE_BLOCK};
    static const unsigned groups[] = {0, 0, 0, 0, 16, 64, 128};
    static const feather_dtype dts[] = {FEATHER_F16, FEATHER_BF16, FEATHER_F32};
    for (size_t si = 0; si < nsh; si++) {
        uint64_t n = shapes[si].n, k = shapes[si].k;
        void *w = malloc(n * k * 4);
        float *imp = malloc(k * 4);
        fill_importance(k, si, imp);
        for (int dti = 0; dti < 3; dti++)
            for (int kind = 0; kind < kinds; kind++) {
                fill(dts[dti], kind, si, n, k, w);
                for (size_t mi = 0; mi < sizeof modes / sizeof modes[0]; mi++)
                    for (int fmt = 0; fmt < 2; fmt++)
                        for (int packed = 0; packed < 2; packed++)
                            for (int wi = 0; wi < 2; wi++)
                                for (int allow = 0; allow < (kind == DATA_NONFINITE ? 2 : 1); allow++) {
                                    feather_quant_options o = {.format = (feather_fp8)fmt, .mode = modes[mi],
                                                               .group = groups[mi], .name = "blk.0.w",
                                                               .importance = wi ? imp : NULL,
                                                               .allow_nonfinite = allow || kind != DATA_NONFINITE};
                                    if (!feather_scale_count(&o, n, k) || (packed && k % 16)) continue;
                                    if (wi && (modes[mi] == FEATHER_SCALE_NONE || modes[mi] == FEATHER_SCALE_ABSMAX))
                                        continue; /* importance changes nothing there */
                                    compare(t, f, ctx, &o, dts[dti], w, n, k, packed, NULL, what);
                                }
            }
        free(w);
        free(imp);
    }
}

TEST(gpu_quant_model_matches_cpu_bit_for_bit) {
    feather_ctx *ctx = feather_ctx_new(2);
    REQUIRE(ctx);
    /* N = 1; K = 16; K not a multiple of 16 (plain only); several groups and rows */
    const shape shapes[] = {{1, 16}, {3, 48}, {5, 40}, {4, 256}, {2, 640}};
    tally t = {0};
    sweep_cases(&t, via_model, ctx, shapes, sizeof shapes / sizeof shapes[0], DATA_KINDS, "model");
    /* a row longer than the CPU's one-pass limit (65536): channel and F32 tensor mode */
    uint64_t n = 2, k = 70016;
    float *w = malloc(n * k * 4);
    fill(FEATHER_F32, DATA_ADVERSARIAL, 9, n, k, w);
    feather_quant_options o = {.format = FEATHER_FP8_E5M2, .mode = FEATHER_SCALE_CHANNEL};
    compare(&t, via_model, ctx, &o, FEATHER_F32, w, n, k, 1, NULL, "model long");
    o.mode = FEATHER_SCALE_TENSOR;
    compare(&t, via_model, ctx, &o, FEATHER_F32, w, n, k, 0, NULL, "model long");
    free(w);
    printf("    %d cases (%d refused alike), %d failed; statistics exact in %d, worst relative %.3g\n", t.cases,
           t.refused, t.failed, t.stats_exact, t.worst_stat);
    CHECK(t.cases > 1000);
    CHECK(t.refused > 0); /* NaN/Inf without allow_nonfinite */
    CHECK_EQ_U(t.failed, 0);
    feather_ctx_free(ctx);
}

/* ---------------------------------------------------------------- on the GPU ---- */

TEST(gpu_quant_refuses_gpu_without_one_and_auto_falls_back) {
    char desc[256];
    if (feather_gpu_available(desc, sizeof desc)) {
        printf("    (a GPU is usable: the refusal is not what runs here)\n");
        return;
    }
    uint16_t w[32] = {0x3c00};
    uint8_t q[32];
    float s[2];
    feather_error err = {0};
    feather_quant_options o = {.format = FEATHER_FP8_E5M2, .mode = FEATHER_SCALE_CHANNEL};
    CHECK(feather_quantize_on(NULL, FEATHER_DEVICE_GPU, &o, FEATHER_F16, w, 2, 16, 1, q, s, NULL, &err) ==
          FEATHER_E_UNSUPPORTED);
    CHECK_STR_CONTAINS(err.message, "device gpu");
    CHECK(feather_quantize_on(NULL, FEATHER_DEVICE_GPU, &o, FEATHER_F16, w, 0, 16, 1, q, s, NULL, &err) ==
          FEATHER_E_UNSUPPORTED);
    uint8_t q2[32];
    float s2[2];
    CHECK(feather_quantize_on(NULL, FEATHER_DEVICE_AUTO, &o, FEATHER_F16, w, 2, 16, 1, q, s, NULL, &err) == FEATHER_OK);
    CHECK(feather_quantize(NULL, &o, FEATHER_F16, w, 2, 16, 1, q2, s2, NULL, &err) == FEATHER_OK);
    CHECK(!memcmp(q, q2, 32) && !memcmp(s, s2, sizeof s));
    /* invalid arguments are refused as the CPU refuses them, whatever the device */
    o.mode = FEATHER_SCALE_BLOCK;
    o.group = 24;
    CHECK(feather_quantize_on(NULL, FEATHER_DEVICE_GPU, &o, FEATHER_F16, w, 2, 16, 1, q, s, NULL, &err) == FEATHER_E_ARG);
}

TEST(gpu_quant_matches_cpu_every_mode_format_dtype_layout) {
    if (!tu_gpu_or_skip("GPU quantisation tests")) return;
    feather_ctx *ctx = feather_ctx_new(0);
    REQUIRE(ctx);
    const shape shapes[] = {{1, 16}, {3, 48}, {5, 40}, {17, 256}, {2, 640}, {33, 1024}, {1, 4096}};
    tally t = {0};
    /* chunks of 4 KiB: most shapes go through the pipeline in several chunks and every slot */
    feather_gpu_quant_set_chunk(4096);
    sweep_cases(&t, via_gpu, ctx, shapes, sizeof shapes / sizeof shapes[0], DATA_KINDS, "gpu");
    feather_gpu_quant_set_chunk(0);
    sweep_cases(&t, via_gpu, ctx, shapes + 3, 3, 2, "gpu default chunks");
    /* long rows (channel; F32 tensor mode), larger weights, block sizes that are not in the
     * kernels' register path */
    const shape big[] = {{2, 70016}, {300, 3072}, {64, 12288}};
    for (size_t i = 0; i < 3; i++) {
        uint64_t n = big[i].n, k = big[i].k;
        void *w = malloc(n * k * 4);
        float *imp = malloc(k * 4);
        fill_importance(k, i, imp);
        for (int dti = 0; dti < 3; dti++) {
            feather_dtype dt = dti == 0 ? FEATHER_F16 : dti == 1 ? FEATHER_BF16 : FEATHER_F32;
            fill(dt, DATA_ADVERSARIAL, i, n, k, w);
            const feather_scale_mode modes[] = {FEATHER_SCALE_CHANNEL, FEATHER_SCALE_TENSOR, FEATHER_SCALE_BLOCK,
                                                FEATHER_SCALE_BLOCK};
            const unsigned groups[] = {0, 0, 128, 512};
            for (int m = 0; m < 4; m++) {
                feather_quant_options o = {.format = (feather_fp8)(m & 1), .mode = modes[m], .group = groups[m],
                                           .importance = (m + dti) % 2 ? imp : NULL, .allow_nonfinite = 1};
                if (!feather_scale_count(&o, n, k)) continue;
                compare(&t, via_gpu, ctx, &o, dt, w, n, k, (m + i) % 2, NULL, "gpu big");
            }
        }
        free(w);
        free(imp);
    }
    /* page-locked input and output: the pipeline copies straight to and from them */
    {
        uint64_t n = 96, k = 2048;
        void *w = feather_host_alloc(n * k * 2);
        uint8_t *q = feather_host_alloc(n * k);
        REQUIRE(w && q);
        CHECK(feather_host_pinned(w, n * k * 2) && feather_host_pinned(q, n * k));
        fill(FEATHER_BF16, DATA_NORMAL, 4, n, k, w);
        feather_gpu_quant_set_chunk(16384);
        for (int m = 0; m < 3; m++) {
            feather_quant_options o = {.format = FEATHER_FP8_E5M2,
                                       .mode = m == 0 ? FEATHER_SCALE_BLOCK : m == 1 ? FEATHER_SCALE_TENSOR : FEATHER_SCALE_CHANNEL,
                                       .group = 64};
            for (int packed = 0; packed < 2; packed++) compare(&t, via_gpu, ctx, &o, FEATHER_BF16, w, n, k, packed, q, "gpu pinned");
        }
        feather_gpu_quant_set_chunk(0);
        feather_host_free(w);
        feather_host_free(q);
    }
    printf("    %d GPU cases (%d refused alike), %d failed; statistics exact in %d, worst relative %.3g\n", t.cases,
           t.refused, t.failed, t.stats_exact, t.worst_stat);
    CHECK(t.cases > 1000);
    CHECK_EQ_U(t.failed, 0);
    feather_gpu_release();
    feather_ctx_free(ctx);
}

/* ---------------------------------------------------------------- the converter ---- */

static const char *bin(const char *name) {
    static char b[4][512];
    static int i;
    i = (i + 1) % 4;
    snprintf(b[i], sizeof b[i], "%s/%s", test_bindir(), name);
    return b[i];
}

TEST(gpu_quant_convert_device_gpu_without_gpu_fails_cleanly) {
    char desc[256];
    if (feather_gpu_available(desc, sizeof desc)) {
        printf("    (a GPU is usable: see gpu_quant_convert_cpu_and_gpu_files_identical)\n");
        return;
    }
    const char *in = test_path("m.safetensors"), *out = test_path("out.safetensors");
    REQUIRE(test_run("%s -q --family flux --hidden 64 --blocks 1 -o %s", bin("feather-sample"), in) == 0);
    CHECK_EQ_U(test_run("%s --device gpu -o %s %s", bin("feather-convert"), out, in), 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "device gpu");
    /* one line, and nothing left behind */
    const char *o = test_cmd_output();
    int lines = 0;
    for (const char *p = o; *p; p++) lines += *p == '\n';
    CHECK_EQ_U(lines, 1);
    struct stat st;
    CHECK(stat(out, &st) != 0);
    CHECK_EQ_U(test_run("ls -A %s | grep -v '^m.safetensors$' | grep -v '^cmd.out$' | wc -l | grep -qx 0", test_tmpdir()), 0);
    /* auto on 1 core: this small file goes to the CPU without a look for a GPU, so no notice
     * (auto looks only below 8 cores, with channel or block scales, from half a GB a core) */
    REQUIRE(tu_confine_cores(1) == 1);
    CHECK_EQ_U(test_run("%s --json --device auto -o %s %s", bin("feather-convert"), out, in), 0);
    tu_confine_cores(0);
    CHECK(!strstr(test_cmd_output(), "notice:"));
    CHECK_STR_CONTAINS(test_cmd_output(), "\"device\":\t\"cpu\"");
    /* the recorded command leaves the device out: the same file from either device */
    feather_reader *r;
    REQUIRE(feather_open(&r, out, FEATHER_OPEN_HEADER_ONLY, NULL) == FEATHER_OK);
    const char *cmd = feather_metadata_get(r, 0, "feather.command");
    CHECK(cmd && !strstr(cmd, "--device") && strstr(cmd, "-o "));
    feather_close(r);
}

/* auto where it looks for a GPU (half a gigabyte of weights, channel scales, on 1 core) in a
 * build with GPU support and no usable GPU: the CPU converts, with a notice; a small file after it
 * needs no look and adds none. The input is a sparse file of zeros; its conversion still takes a
 * few seconds, so this runs only where the notice can appear. */
TEST(gpu_quant_convert_auto_notice_without_gpu) {
    char desc[256];
    if (feather_gpu_available(desc, sizeof desc) || strstr(desc, "without GPU support")) {
        char msg[400];
        snprintf(msg, sizeof msg, "auto's notice NOT TESTED: it needs a GPU build without a usable GPU (%s)", desc);
        test_skip(msg);
        return;
    }
    char in[600], in2[600], out[600];
    snprintf(in, sizeof in, "%s", test_path("big.safetensors"));
    snprintf(in2, sizeof in2, "%s", test_path("small.safetensors"));
    snprintf(out, sizeof out, "%s", test_path("out/"));
    REQUIRE(tu_write_sparse_model(in, 16384, 16384) == 0); /* 537 MB */
    REQUIRE(test_run("%s -q --family flux --hidden 64 --blocks 1 -o %s", bin("feather-sample"), in2) == 0);
    REQUIRE(tu_confine_cores(1) == 1);
    /* (zstd: the zeros written as a few KB) */
    CHECK_EQ_U(test_run("%s --json --zstd --scale channel --device auto -o %s %s %s", bin("feather-convert"), out, in, in2),
               0);
    tu_confine_cores(0);
    int notices = 0;
    for (const char *p = test_cmd_output(); (p = strstr(p, "notice: no usable GPU")); p++) notices++;
    CHECK_EQ_U(notices, 1);
    CHECK(!strstr(test_cmd_output(), "\"device\":\t\"gpu\""));
    test_run("rm -rf %s", out);
}

/* feather-convert --device `device` with opts of `in`, its output moved to dest afterwards: the
 * same command and the same output name (which the file records) on both devices, as
 * feather.command leaves the device out. Returns the exit status. */
static int convert_on(const char *device, const char *opts, const char *in, const char *dest) {
    char out[600];
    snprintf(out, sizeof out, "%s", test_path("out.safetensors"));
    return test_run("%s --json --force --device %s %s -o %s %s && mv %s %s", bin("feather-convert"), device, opts, out,
                    in, out, dest);
}

TEST(gpu_quant_convert_cpu_and_gpu_files_identical) {
    if (!tu_gpu_or_skip("GPU converter tests")) return;
    /* (the comfy layout takes one scale per tensor) */
    static const char *const runs[][2] = {
        {"bf16", "--scale channel"},
        {"bf16", "--scale block:128"},
        {"bf16", "--scale tensor"},
        {"bf16", "--scale none"},
        {"f16", "--scale block:64"},
        {"f16", "--scale tensor --layout comfy --format e4m3fn"},
        {"f16", "--scale absmax"},
        {"f32", "--scale tensor --layout comfy"},
        {"f32", "--scale block:16"},
        {"f32", "--scale absmax --layout comfy --format e4m3fn"},
        /* an fp8 input (the bf16 model in the comfy layout, e4m3fn): its layers requantised,
         * the excluded ones dequantised to BF16 */
        {"e4m3", "--scale channel --exclude 'double_blocks[.]0[.]img_attn'"},
    };
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char in[600], a[600], b[600];
        snprintf(in, sizeof in, "%s", test_path(runs[i][0]));
        snprintf(a, sizeof a, "%s", test_path("cpu.safetensors"));
        snprintf(b, sizeof b, "%s", test_path("gpu.safetensors"));
        struct stat st;
        if (!strcmp(runs[i][0], "e4m3")) {
            if (stat(in, &st) != 0)
                REQUIRE(test_run("%s -q --layout comfy --format e4m3fn --scale tensor --device cpu -o %s %s",
                                 bin("feather-convert"), in, test_path("bf16")) == 0);
        } else if (stat(in, &st) != 0) {
            REQUIRE(test_run("%s -q --family flux --dtype %s --hidden 256 --blocks 2 -o %s", bin("feather-sample"),
                             runs[i][0], in) == 0);
        }
        CHECK_EQ_U(convert_on("cpu", runs[i][1], in, a), 0);
        CHECK_STR_CONTAINS(test_cmd_output(), "\"device\":\t\"cpu\"");
        CHECK_EQ_U(convert_on("gpu", runs[i][1], in, b), 0);
        CHECK_STR_CONTAINS(test_cmd_output(), "\"device\":\t\"gpu\"");
        if (!strcmp(runs[i][0], "e4m3")) CHECK_STR_CONTAINS(test_cmd_output(), "dequantised to BF16");
        int same = tu_files_equal(a, b);
        printf("    %s %s: %s\n", runs[i][0], runs[i][1], same ? "identical" : "DIFFERENT");
        CHECK(same);
    }
}

/* --device auto (feather_convert_device): on 2 cores the GPU for 2 GB of weights (a sparse file of
 * zeros) with block scales, with the CPU's bytes, and the CPU for a small file or a tensor scale;
 * on 8 cores, where there are, the CPU. */
TEST(gpu_quant_convert_auto_weighs_cores_mode_and_size) {
    if (!tu_gpu_or_skip("GPU converter tests")) return;
    char in[600], small[600], a[600], b[600];
    snprintf(in, sizeof in, "%s", test_path("big.safetensors"));
    snprintf(small, sizeof small, "%s", test_path("small.safetensors"));
    snprintf(a, sizeof a, "%s", test_path("auto2.safetensors"));
    snprintf(b, sizeof b, "%s", test_path("cpu2.safetensors"));
    REQUIRE(tu_write_sparse_model(in, 32768, 32768) == 0);
    REQUIRE(test_run("%s -q --family flux --hidden 256 --blocks 1 -o %s", bin("feather-sample"), small) == 0);
    REQUIRE(tu_confine_cores(2) >= 1);
    CHECK_EQ_U(convert_on("auto", "--scale block:128", in, a), 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "\"device\":\t\"gpu\"");
    CHECK_EQ_U(convert_on("cpu", "--scale block:128", in, b), 0);
    CHECK(tu_files_equal(a, b));
    CHECK_EQ_U(convert_on("auto", "--scale tensor", in, b), 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "\"device\":\t\"cpu\"");
    CHECK_EQ_U(convert_on("auto", "--scale block:128", small, b), 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "\"device\":\t\"cpu\"");
    if (tu_confine_cores(8) == 8) {
        CHECK_EQ_U(convert_on("auto", "--scale block:128", in, b), 0);
        CHECK_STR_CONTAINS(test_cmd_output(), "\"device\":\t\"cpu\"");
    } else {
        printf("    (fewer than 8 cores here: auto's CPU side not run)\n");
    }
    tu_confine_cores(0);
    remove(a);
    remove(b);
    remove(in);
}

/* A copy of in whose tensors named like LoRA factors are renamed ("lora" becomes "lorx"), so
 * that the real factors' values convert as plain linear weights. 1: written; 0: no such name;
 * -1: failed. */
static int copy_lora_as_linear(const char *in, const char *out) {
    feather_reader *r;
    feather_writer *w;
    feather_error err = {0};
    if (feather_open(&r, in, 0, &err)) return 0; /* refused files are compared as they are */
    int any = 0, bad = 0;
    for (size_t i = 0; i < feather_count(r); i++) any |= strstr(feather_tensor_at(r, i)->name, "lora") != NULL;
    if (!any) {
        feather_close(r);
        return 0;
    }
    feather_write_options wo = {.overwrite = 1};
    if (feather_writer_open(&w, out, &wo, &err)) {
        feather_close(r);
        return -1;
    }
    for (size_t i = 0; i < feather_count(r) && !bad; i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        char name[512];
        snprintf(name, sizeof name, "%s", t->name);
        for (char *l = strstr(name, "lora"); l; l = strstr(l, "lora")) l[3] = 'x';
        bad = feather_writer_tensor(w, name, t->dtype, t->ndim, t->shape, &err) != FEATHER_OK;
    }
    bad = bad || feather_writer_begin(w, &err) != FEATHER_OK;
    for (size_t i = 0; i < feather_writer_count(w) && !bad; i++) {
        const void *data;
        const feather_tensor *t = feather_tensor_at(r, i); /* declared in reader order */
        bad = feather_tensor_data(r, t, &data, &err) != FEATHER_OK ||
              feather_writer_write(w, data, (size_t)t->nbytes, &err) != FEATHER_OK;
    }
    if (bad) feather_writer_abort(w);
    else bad = feather_writer_commit(w, &err) != FEATHER_OK;
    feather_close(r);
    return bad ? -1 : 1;
}

/* The real checkpoints (FEATHER_TESTDATA): from each, the GPU writes the bytes the CPU writes,
 * in every scale mode and both formats; where the CPU refuses a file (nothing to convert,
 * truncated, trailing bytes), the GPU refuses it with the same exit status. LoRAs have
 * nothing to convert, so their real factors are also compared in a copy that names them as
 * plain linear weights. */
TEST(gpu_quant_real_files_cpu_and_gpu_identical) {
    if (!tu_gpu_or_skip("GPU converter tests on real files")) return;
    DIR *d = opendir(test_real_dir());
    if (!d) {
        test_skip("*** real test data missing (set FEATHER_TESTDATA) ***");
        return;
    }
    /* (e4m3fn is written in the comfy layout only, with one scale per tensor) */
    static const char *const runs[] = {"--scale tensor", "--scale channel", "--scale block:64", "--scale block:16",
                                       "--scale absmax --format e4m3fn --layout comfy"};
    int files = 0, identical = 0, refused = 0, identical_renamed = 0;
    const struct dirent *e;
    char copy[600];
    snprintf(copy, sizeof copy, "%s", test_path("renamed.safetensors"));
    while ((e = readdir(d))) {
        const size_t l = strlen(e->d_name);
        if (l < 12 || strcmp(e->d_name + l - 12, ".safetensors") != 0) continue;
        char orig[1200], a[600], b[600];
        snprintf(orig, sizeof orig, "%s/%s", test_real_dir(), e->d_name);
        snprintf(a, sizeof a, "%s", test_path("cpu.safetensors"));
        snprintf(b, sizeof b, "%s", test_path("gpu.safetensors"));
        const int renamed = copy_lora_as_linear(orig, copy);
        CHECK(renamed >= 0);
        for (int pass = 0; pass < 1 + (renamed > 0); pass++) {
            const char *in = pass ? copy : orig;
            files++;
            for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
                remove(a);
                remove(b);
                const int rc_cpu = convert_on("cpu", runs[i], in, a), rc_gpu = convert_on("gpu", runs[i], in, b);
                if (rc_cpu != rc_gpu)
                    test_fail(__FILE__, __LINE__, "%s%s %s: exit status %d on the CPU, %d on the GPU", e->d_name,
                              pass ? " (renamed)" : "", runs[i], rc_cpu, rc_gpu);
                else if (rc_cpu != 0)
                    refused++;
                else if (!tu_files_equal(a, b))
                    test_fail(__FILE__, __LINE__, "%s%s %s: the GPU's file differs from the CPU's", e->d_name,
                              pass ? " (renamed)" : "", runs[i]);
                else {
                    identical++;
                    identical_renamed += pass;
                }
            }
        }
    }
    closedir(d);
    printf("    %d real files (LoRAs also renamed): %d conversions identical (%d of renamed LoRAs), %d refused alike\n",
           files, identical, identical_renamed, refused);
    CHECK(identical > identical_renamed && identical_renamed > 0);
}

/* Weight-space quality of the scale modes: relative RMS error, SNR, cosine similarity and the
 * largest absolute error of W against s·Q, per fp8 format and mode, on the real checkpoints
 * of the test data (aggregated per file) and on synthetic heavy-tailed matrices.
 *
 *   quality_bench [--data DIR] [--fmt e5m2|e4m3fn|both] [--grid N] [--markdown]
 *   quality_bench --grid-study [--data DIR] [--fmt ...]
 *
 * The default report has one row per data set and mode. --grid-study instead compares grids
 * (ratio ranges and candidate counts) by their SNR gain over absmax, pooled per data set.
 *
 * Errors are computed here from the scalar codec (q = fp8(w·(1/s)), ŵ = s·value(q)), not by
 * the library's cast, so the numbers check the scales independently of it. Real tensors used:
 * every 2-D F16/BF16/F32 tensor whose row length is a multiple of 128 (so that every mode
 * applies to the same weights); the others are counted and skipped. Aggregates treat a file as
 * one concatenated vector (large tensors weigh more). */
#include "feather/feather.h"
#include "scale_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- data sets ---- */

typedef struct tensor {
    feather_dtype dt;
    uint64_t n, k;
    const void *p;
} tensor;

typedef struct dataset {
    char name[128];
    tensor *t;
    int nt, skipped;
    void *owned; /* file contents or generated data */
} dataset;

static int add_tensor(dataset *d, feather_dtype dt, uint64_t n, uint64_t k, const void *p) {
    tensor *t = realloc(d->t, sizeof *t * (size_t)(d->nt + 1));
    if (!t) return -1;
    d->t = t;
    d->t[d->nt].dt = dt;
    d->t[d->nt].n = n;
    d->t[d->nt].k = k;
    d->t[d->nt].p = p;
    d->nt++;
    return 0;
}

static int load_file(dataset *d, const char *dir, const char *file) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)sz + 1);
    int ok = buf && sz >= 8 && fread(buf, 1, (size_t)sz, f) == (size_t)sz;
    fclose(f);
    if (!ok) {
        free(buf);
        return -1;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | buf[i];
    cJSON *h = hl <= (uint64_t)sz - 8 ? cJSON_ParseWithLength((const char *)buf + 8, (size_t)hl) : NULL;
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", file);
    d->owned = buf;
    for (cJSON *t = h ? h->child : NULL; t; t = t->next) {
        cJSON *dt = cJSON_GetObjectItem(t, "dtype"), *sh = cJSON_GetObjectItem(t, "shape"),
              *of = cJSON_GetObjectItem(t, "data_offsets");
        if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of)) continue;
        feather_dtype ty;
        if (!strcmp(dt->valuestring, "F16")) ty = FEATHER_F16;
        else if (!strcmp(dt->valuestring, "BF16")) ty = FEATHER_BF16;
        else if (!strcmp(dt->valuestring, "F32")) ty = FEATHER_F32;
        else continue;
        if (cJSON_GetArraySize(sh) != 2) continue;
        uint64_t n = (uint64_t)cJSON_GetArrayItem(sh, 0)->valuedouble,
                 k = (uint64_t)cJSON_GetArrayItem(sh, 1)->valuedouble,
                 b = (uint64_t)cJSON_GetArrayItem(of, 0)->valuedouble,
                 e = (uint64_t)cJSON_GetArrayItem(of, 1)->valuedouble;
        uint64_t es = ty == FEATHER_F32 ? 4 : 2;
        if (e < b || e - b != n * k * es || 8 + hl + e > (uint64_t)sz) continue; /* data missing */
        if (k % 128 || n == 0) {
            d->skipped++;
            continue;
        }
        add_tensor(d, ty, n, k, buf + 8 + hl + b);
    }
    cJSON_Delete(h);
    return d->nt > 0 ? 0 : -1;
}

static uint64_t rs = 0x2545f4914f6cdd1dull;
static double unit(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return ((double)(rs >> 11) + 0.5) / 9007199254740992.0;
}
static double normal(void) { return sqrt(-2 * log(unit())) * cos(6.283185307179586 * unit()); }

enum { S_NORMAL, S_STUDENT, S_ROWSPREAD, S_OUTLIERS };

/* A bf16 (1024, 4096) matrix: the dtype of most current checkpoints. */
static void synth(dataset *d, int kind) {
    const uint64_t n = 1024, k = 4096;
    static const char *names[] = {"synthetic N(0, 0.02)", "synthetic Student-t nu=3",
                                  "synthetic rows with log-normal spread",
                                  "synthetic outlier columns"};
    memset(d, 0, sizeof *d);
    snprintf(d->name, sizeof d->name, "%s", names[kind]);
    uint16_t *p = malloc(sizeof *p * (size_t)(n * k));
    d->owned = p;
    rs = 0x9e3779b97f4a7c15ull + (uint64_t)kind;
    double colf[4096];
    for (uint64_t c = 0; c < k; c++) colf[c] = (kind == S_OUTLIERS && unit() < 0.01) ? 20 : 1;
    for (uint64_t r = 0; r < n; r++) {
        double rowf = kind == S_ROWSPREAD ? exp(normal()) : 1;
        for (uint64_t c = 0; c < k; c++) {
            double v;
            if (kind == S_STUDENT) {
                double ch = 0;
                for (int i = 0; i < 3; i++) {
                    double g = normal();
                    ch += g * g;
                }
                v = normal() / sqrt(ch / 3);
            } else v = normal();
            p[r * k + c] = feather_f32_to_bf16((float)(0.02 * v * rowf * colf[c]));
        }
    }
    add_tensor(d, FEATHER_BF16, n, k, p);
}

/* ---------------------------------------------------------------- errors ---- */

typedef struct acc {
    double ww, ee, wq, qq, maxe;
    uint64_t nscales, nw;
} acc;

static float value(feather_dtype dt, const void *p, size_t i) {
    if (dt == FEATHER_F16) return feather_f16_to_f32(((const uint16_t *)p)[i]);
    if (dt == FEATHER_BF16) return feather_bf16_to_f32(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* Adds the error of W (tensor t) under the given scales to a. */
static void measure(const tensor *t, feather_fp8 fmt, feather_scale_mode mode, unsigned g,
                    const float *sc, acc *a) {
    uint64_t ng = mode == FEATHER_SCALE_BLOCK ? t->k / g : 1;
    a->nscales += mode == FEATHER_SCALE_BLOCK     ? t->n * ng
                  : mode == FEATHER_SCALE_CHANNEL ? t->n
                  : mode == FEATHER_SCALE_NONE    ? 0 /* s = 1 need not be stored */
                                                  : 1;
    a->nw += t->n * t->k;
    for (uint64_t r = 0; r < t->n; r++)
        for (uint64_t c = 0; c < t->k; c++) {
            float s = mode == FEATHER_SCALE_CHANNEL ? sc[r]
                      : mode == FEATHER_SCALE_BLOCK ? sc[r * ng + c / g]
                                                    : sc[0];
            float w = value(t->dt, t->p, (size_t)(r * t->k + c));
            if (!isfinite(w)) continue;
            float q = feather_fp8_to_f32(feather_f32_to_fp8(w * (1.0f / s), fmt), fmt) * s;
            double e = (double)w - (double)q;
            a->ww += (double)w * w;
            a->ee += e * e;
            a->wq += (double)w * q;
            a->qq += (double)q * q;
            if (fabs(e) > a->maxe) a->maxe = fabs(e);
        }
}

static double snr(const acc *a) { return a->ee > 0 ? 10 * log10(a->ww / a->ee) : INFINITY; }

static int run_mode(feather_ctx *ctx, const dataset *d, feather_fp8 fmt, feather_scale_mode mode,
                    unsigned g, const float *r, unsigned nr, acc *a) {
    memset(a, 0, sizeof *a);
    for (int i = 0; i < d->nt; i++) {
        const tensor *t = &d->t[i];
        feather_quant_options o;
        memset(&o, 0, sizeof o);
        o.format = fmt;
        o.mode = mode;
        o.group = g;
        o.allow_nonfinite = 1;
        uint64_t cnt = feather_scale_count(&o, t->n, t->k);
        float *sc = malloc(sizeof(float) * (size_t)(cnt ? cnt : 1));
        feather_error e;
        if (!sc || feather_scale_search_ratios(ctx, &o, t->dt, t->p, t->n, t->k, r, nr, sc, NULL,
                                               &e) != FEATHER_OK) {
            fprintf(stderr, "%s: %s\n", d->name, sc ? e.message : "out of memory");
            free(sc);
            return -1;
        }
        measure(t, fmt, mode, g, sc, a);
        free(sc);
    }
    return 0;
}

/* ---------------------------------------------------------------- reports ---- */

static const char *real_files[] = {
    "leighwoods_flux_lora_f16.safetensors", "vfph55_sd15_lora_bf16.safetensors",
    "bk7195_pythia_lora_f16.safetensors",   "branbot6_lora_f32.safetensors",
    "tl_reverse_model_f32.safetensors",     "mlx_adapters_f32.safetensors",
    "elyas_mnist_mlp_f32.safetensors",      "bumblebee_site_f32.safetensors"};

static const struct { const char *spell; feather_scale_mode m; unsigned g; } modes[] = {
    {"none", FEATHER_SCALE_NONE, 0},       {"absmax", FEATHER_SCALE_ABSMAX, 0},
    {"tensor", FEATHER_SCALE_TENSOR, 0},   {"channel", FEATHER_SCALE_CHANNEL, 0},
    {"block:128", FEATHER_SCALE_BLOCK, 128}, {"block:64", FEATHER_SCALE_BLOCK, 64},
    {"block:32", FEATHER_SCALE_BLOCK, 32}};
#define NMODES (int)(sizeof modes / sizeof *modes)

static void report(feather_ctx *ctx, dataset *ds, int nds, feather_fp8 fmt, unsigned grid, int md) {
    float r[FEATHER_GRID_MAX];
    unsigned nr = feather_grid_size(grid);
    feather_grid_ratios(nr, r);
    printf(md ? "\n### %s, grid %u\n\n| data | mode | rel. RMS | SNR dB | Δ vs absmax | cosine | max abs err | scale bytes / weight |\n|---|---|---|---|---|---|---|---|\n"
              : "\n# %s, grid %u\n%-40s %-10s %9s %8s %8s %10s %11s %8s\n",
           feather_fp8_name(fmt), nr, "data", "mode", "relRMS", "SNR dB", "d absmax", "cosine",
           "max|err|", "B/weight");
    for (int i = 0; i < nds; i++) {
        acc base;
        if (run_mode(ctx, &ds[i], fmt, FEATHER_SCALE_ABSMAX, 0, r, 1, &base)) continue;
        for (int m = 0; m < NMODES; m++) {
            acc a;
            if (run_mode(ctx, &ds[i], fmt, modes[m].m, modes[m].g, r, nr, &a)) continue;
            double rel = sqrt(a.ee / a.ww), cs = a.wq / sqrt(a.ww * a.qq);
            double bpw = 4.0 * (double)a.nscales / (double)a.nw;
            if (md)
                printf("| %s | %s | %.3f%% | %.2f | %+.2f | %.6f | %.3g | %.4f |\n",
                       m ? "" : ds[i].name, modes[m].spell, 100 * rel, snr(&a), snr(&a) - snr(&base),
                       cs, a.maxe, bpw);
            else
                printf("%-40s %-10s %8.3f%% %8.2f %+8.2f %10.6f %11.3g %8.4f\n",
                       m ? "" : ds[i].name, modes[m].spell, 100 * rel, snr(&a),
                       snr(&a) - snr(&base), cs, a.maxe, bpw);
        }
    }
}

/* Candidate sets compared by --grid-study. Each keeps r_0 = 1. */
enum { G_UP, G_DOWN, G_BOTH, G_WIDE, G_KINDS };
static const char *gnames[] = {"[1,2)", "(1/2,1]", "[3/4,3/2)", "(1/2,2)"};
static unsigned ratios_of(int kind, unsigned n, float *r) {
    if (kind == G_UP) feather_grid_ratios(n, r);
    else if (kind == G_DOWN)
        for (unsigned j = 0; j < n; j++) r[j] = 1.0f - 0.5f * (float)j / (float)n;
    else {
        /* geometric over the range, with 1 moved to the front */
        double lo = kind == G_BOTH ? 0.75 : 0.5, hi = kind == G_BOTH ? 1.5 : 2.0;
        r[0] = 1;
        unsigned m = 1;
        for (unsigned j = 0; j + 1 < n; j++) {
            float v = (float)(lo * pow(hi / lo, (j + 0.5) / (n - 1)));
            if (v != 1.0f) r[m++] = v;
        }
        return m;
    }
    return n;
}

static void grid_study(feather_ctx *ctx, dataset *ds, int nds, feather_fp8 fmt) {
    static const unsigned sizes[] = {2, 4, 8, 16, 32, 64};
    printf("\n# grid study, %s: SNR gain over absmax in dB (pooled per data set)\n", feather_fp8_name(fmt));
    for (int m = 2; m < NMODES; m++) {
        printf("\n## %s\n%-40s %-10s", modes[m].spell, "data", "ratios");
        for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) printf(" %7u", sizes[z]);
        printf("\n");
        for (int i = 0; i < nds; i++) {
            float one = 1;
            acc base;
            if (run_mode(ctx, &ds[i], fmt, modes[m].m, modes[m].g, &one, 1, &base)) continue;
            for (int gk = 0; gk < G_KINDS; gk++) {
                printf("%-40s %-10s", gk ? "" : ds[i].name, gnames[gk]);
                for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
                    float r[FEATHER_GRID_MAX];
                    unsigned nr = ratios_of(gk, sizes[z], r);
                    acc a;
                    if (run_mode(ctx, &ds[i], fmt, modes[m].m, modes[m].g, r, nr, &a)) break;
                    printf(" %+7.3f", snr(&a) - snr(&base));
                }
                printf("\n");
                fflush(stdout);
            }
        }
    }
}

int main(int argc, char **argv) {
    const char *dir = "../shared/testdata/real";
    int fmts = 1, md = 0, study = 0;
    unsigned grid = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--data") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--grid") && i + 1 < argc) grid = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--markdown")) md = 1;
        else if (!strcmp(argv[i], "--grid-study")) study = 1;
        else if (!strcmp(argv[i], "--fmt") && i + 1 < argc) {
            i++;
            fmts = !strcmp(argv[i], "both") ? 3 : !strcmp(argv[i], "e4m3fn") ? 2 : 1;
        } else {
            fprintf(stderr, "usage: quality_bench [--data DIR] [--fmt e5m2|e4m3fn|both] "
                            "[--grid N] [--markdown] [--grid-study]\n");
            return 64;
        }
    }
    dataset ds[16];
    int nds = 0;
    for (size_t i = 0; i < sizeof real_files / sizeof *real_files; i++) {
        if (load_file(&ds[nds], dir, real_files[i]) == 0) {
            fprintf(stderr, "%s: %d tensors used, %d skipped (row length not a multiple of 128)\n",
                    ds[nds].name, ds[nds].nt, ds[nds].skipped);
            nds++;
        } else fprintf(stderr, "%s/%s: no usable tensors or not readable; skipped\n", dir,
                       real_files[i]);
    }
    for (int k = S_NORMAL; k <= S_OUTLIERS; k++) synth(&ds[nds++], k);
    feather_ctx *ctx = feather_ctx_new(0);
    if (!ctx) return 2;
    for (int f = 0; f < 2; f++) {
        if (!(fmts & (1 << f))) continue;
        feather_fp8 fmt = f ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2;
        if (study) grid_study(ctx, ds, nds, fmt);
        else report(ctx, ds, nds, fmt, grid, md);
    }
    feather_ctx_free(ctx);
    for (int i = 0; i < nds; i++) {
        free(ds[i].t);
        free(ds[i].owned);
    }
    return 0;
}

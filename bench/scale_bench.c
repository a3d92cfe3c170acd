/* Speed of the scale search (and, with --quantize, of the whole feather_quantize: search, cast
 * and pack), in GB/s of input, on a synthetic (N, K) weight, one context of T threads.
 *
 *   scale_bench [--n N] [--k K] [--dtype f16|bf16|f32] [--threads T] [--reps R]
 *               [--grid G] [--fmt e5m2|e4m3fn] [--quantize] [MODE...]
 *
 * MODE is any scale mode spelling (default: absmax tensor channel block:128 block:32). Each
 * line gives the median and best of R timed runs after one warm-up (wall clock), and the
 * median rate per CPU second of the process (all threads; insensitive to time-slicing).
 * With --quantize every repetition times, back to back, the search alone, the cast and pack
 * alone (feather_quantize_with on the found scales) and feather_quantize, so that the three
 * columns see the same machine state. */
#include "feather/feather.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    uint64_t n = 4096, k = 4096;
    int threads = 1, reps = 7, quant = 0;
    unsigned grid = 0;
    feather_dtype dt = FEATHER_F16;
    feather_fp8 fmt = FEATHER_FP8_E5M2;
    const char *modes[32];
    int nm = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--n") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--k") && i + 1 < argc) k = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(a, "--grid") && i + 1 < argc) grid = (unsigned)atoi(argv[++i]);
        else if (!strcmp(a, "--quantize")) quant = 1;
        else if (!strcmp(a, "--fmt") && i + 1 < argc) {
            i++;
            fmt = !strcmp(argv[i], "e4m3fn") ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2;
        } else if (!strcmp(a, "--dtype") && i + 1 < argc) {
            i++;
            dt = !strcmp(argv[i], "bf16") ? FEATHER_BF16 : !strcmp(argv[i], "f32") ? FEATHER_F32
                                                                                   : FEATHER_F16;
        } else if (a[0] != '-' && nm < 32) modes[nm++] = a;
        else {
            fprintf(stderr, "usage: scale_bench [--n N] [--k K] [--dtype f16|bf16|f32] "
                            "[--threads T] [--reps R] [--grid G] [--fmt e5m2|e4m3fn] "
                            "[--quantize] [MODE...]\n");
            return 64;
        }
    }
    if (!nm) {
        static const char *def[] = {"absmax", "tensor", "channel", "block:128", "block:32"};
        for (int i = 0; i < 5; i++) modes[nm++] = def[i];
    }
    if (reps < 1) reps = 1;
    size_t es = dt == FEATHER_F32 ? 4 : 2, total = (size_t)(n * k);
    void *w = malloc(total * es);
    uint8_t *q = quant ? malloc(total) : NULL;
    float *scales = malloc(sizeof(float) * (total / 16 + 16));
    if (!w || !scales || (quant && !q)) return 2;
    /* N(0, 0.02) weights: the usual shape of a trained layer */
    uint64_t st = 88172645463325252ull;
    for (size_t i = 0; i < total; i += 2) {
        double u[2];
        for (int j = 0; j < 2; j++) {
            st ^= st << 13;
            st ^= st >> 7;
            st ^= st << 17;
            u[j] = ((double)(st >> 11) + 0.5) / 9007199254740992.0;
        }
        double r = sqrt(-2 * log(u[0])) * 0.02;
        float v[2] = {(float)(r * cos(6.283185307179586 * u[1])),
                      (float)(r * sin(6.283185307179586 * u[1]))};
        for (int j = 0; j < 2 && i + (size_t)j < total; j++) {
            if (dt == FEATHER_F16) ((uint16_t *)w)[i + (size_t)j] = feather_f32_to_f16(v[j]);
            else if (dt == FEATHER_BF16) ((uint16_t *)w)[i + (size_t)j] = feather_f32_to_bf16(v[j]);
            else ((float *)w)[i + (size_t)j] = v[j];
        }
    }
    feather_ctx *ctx = feather_ctx_new(threads);
    if (!ctx) return 2;
    printf("# %s (%llu, %llu) = %.1f MB, %d thread(s), simd %s, grid %u, %s, %s\n",
           feather_dtype_name(dt), (unsigned long long)n, (unsigned long long)k,
           (double)(total * es) / 1e6, feather_ctx_threads(ctx),
           feather_simd_name(feather_ctx_simd(ctx)), feather_grid_size(grid),
           feather_fp8_name(fmt), quant ? "search / cast + pack / feather_quantize (packed)" : "search only");
    if (quant)
        printf("%-12s %9s %9s %9s %9s %9s %9s   (GB/s of input: median, best)\n", "mode",
               "search", "best", "cast+pack", "best", "quantize", "best");
    else
        printf("%-12s %10s %10s %10s %12s\n", "mode", "median s", "GB/s", "best GB/s", "GB/cpu-s");
    for (int m = 0; m < nm; m++) {
        feather_quant_options o;
        memset(&o, 0, sizeof o);
        o.format = fmt;
        o.grid = grid;
        feather_error e;
        if (feather_scale_parse(modes[m], &o.mode, &o.group, &e)) {
            fprintf(stderr, "%s\n", e.message);
            return 64;
        }
        double t[3][101], c[101];
        int r = reps > 100 ? 100 : reps;
        for (int i = -1; i < r; i++) {
            double a = now(), ca = cpu_now();
            feather_status s = feather_scale_search(ctx, &o, dt, w, n, k, scales, &e);
            double b = now(), cb = cpu_now();
            if (!s && quant) {
                s = feather_quantize_with(ctx, &o, dt, w, n, k, scales, 1, q, NULL, &e);
                double d = now();
                if (!s) s = feather_quantize(ctx, &o, dt, w, n, k, 1, q, scales, NULL, &e);
                double f = now();
                if (i >= 0) {
                    t[1][i] = d - b;
                    t[2][i] = f - d;
                }
            }
            if (s) {
                fprintf(stderr, "%s: %s\n", modes[m], e.message);
                return 2;
            }
            if (i >= 0) {
                t[0][i] = b - a;
                c[i] = cb - ca;
            }
        }
        double gb = (double)(total * es) / 1e9;
        for (int x = 0; x < 3; x++) qsort(t[x], (size_t)r, sizeof **t, cmpd);
        qsort(c, (size_t)r, sizeof *c, cmpd);
        if (quant)
            printf("%-12s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", modes[m], gb / t[0][r / 2],
                   gb / t[0][0], gb / t[1][r / 2], gb / t[1][0], gb / t[2][r / 2], gb / t[2][0]);
        else
            printf("%-12s %10.4f %10.2f %10.2f %12.2f\n", modes[m], t[0][r / 2], gb / t[0][r / 2],
                   gb / t[0][0], gb / c[r / 2]);
    }
    feather_ctx_free(ctx);
    free(w);
    free(q);
    free(scales);
    return 0;
}

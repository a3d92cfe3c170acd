/* Throughput of casting a weight to fp8 (plain and prepacked) through feather_quantize_with.
 *
 *   quant_bench [--rows N] [--cols K] [--tensors T] [--reps R] [--threads LIST] [--quick]
 *               [--no-scalar] [--simd scalar,avx2,avx512]
 *
 * T tensors of N × K random normal weights (default 4 × 3072 × 12288, 288 MiB of fp16, more
 * than the last-level cache) are cast in rotation, so every pass reads from DRAM. For every
 * source dtype, fp8 format, scale (none = plain cast, tensor = one scale ≠ 1), SIMD level,
 * output layout and thread count it prints GB/s of 16-bit input over R rounds of T tensors: the
 * best round by the wall clock, and the best and median round by the process's CPU time (the
 * per-core rate; on a shared machine the wall clock also counts time spent waiting for a core).
 * The SIMD levels take turns within each round, so comparisons between them are paired. A
 * memcpy of N·K bytes per tensor is the bandwidth reference. */
#include "feather/feather.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

/* CPU time of the whole process (all threads): on a shared machine the wall clock also counts
 * time spent waiting for a core, so per-core rates are taken from this. */
static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#define MAX_REPS 64
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    uint64_t n = 3072, k = 12288;
    int tensors = 4, reps = 3, quick = 0;
    int thr[8] = {1, 2}, nthr = 2;
    int want_lv[3] = {1, 1, 1}; /* scalar, avx2, avx512 */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc) k = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--tensors") && i + 1 < argc) tensors = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            nthr = 0;
            for (char *p = strtok(argv[++i], ","); p && nthr < 8; p = strtok(NULL, ",")) thr[nthr++] = atoi(p);
        } else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--no-scalar")) want_lv[0] = 0;
        else if (!strcmp(argv[i], "--simd") && i + 1 < argc) {
            want_lv[0] = want_lv[1] = want_lv[2] = 0;
            for (char *p = strtok(argv[++i], ","); p; p = strtok(NULL, ","))
                for (int l = 0; l < 3; l++)
                    if (!strcmp(p, feather_simd_name((feather_simd)l))) want_lv[l] = 1;
        }
        else {
            fprintf(stderr, "usage: %s [--rows N] [--cols K] [--tensors T] [--reps R] [--threads 1,2] [--quick] [--no-scalar] [--simd scalar,avx2,avx512]\n", argv[0]);
            return 64;
        }
    }
    if (k % 16 || tensors < 1 || reps < 1 || reps > MAX_REPS || n == 0) {
        fprintf(stderr, "quant_bench: K must be a multiple of 16, counts positive, at most %d rounds\n", MAX_REPS);
        return 64;
    }
    size_t nk = (size_t)(n * k);
    printf("quant_bench: %d tensors of %llu x %llu (%.0f MiB of 16-bit input in rotation), best of %d rounds\n",
           tensors, (unsigned long long)n, (unsigned long long)k, tensors * nk * 2.0 / (1 << 20), reps);

    /* Weights: f32 master values, converted per dtype into the rotation buffers. */
    uint16_t **w16 = calloc((size_t)tensors, sizeof *w16);
    uint8_t **out = calloc((size_t)tensors, sizeof *out);
    if (!w16 || !out) return 2;
    for (int t = 0; t < tensors; t++) {
        w16[t] = malloc(nk * 2);
        out[t] = malloc(nk); /* as a writer's buffer would be: 16-byte aligned only */
        if (!w16[t] || !out[t]) {
            fprintf(stderr, "quant_bench: out of memory\n");
            return 2;
        }
        memset(out[t], 0, nk); /* fault the pages in before timing */
    }
    float *master = malloc(nk * sizeof *master);
    if (!master) return 2;
    for (size_t i = 0; i < nk; i++) master[i] = (float)(gauss() * 0.02);

    /* bandwidth reference: memcpy of N·K bytes per tensor (as many bytes as the output) */
    {
        double best = 1e30, best_cpu = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = now(), c0 = cpu_now();
            for (int t = 0; t < tensors; t++) memcpy(out[t], w16[t], nk);
            double dt = now() - t0, dc = cpu_now() - c0;
            if (dt < best) best = dt;
            if (dc < best_cpu) best_cpu = dc;
        }
        printf("memcpy of N*K bytes per tensor: %.2f GB/s copied (wall), %.2f GB/s (cpu)\n",
               tensors * (double)nk / best / 1e9, tensors * (double)nk / best_cpu / 1e9);
    }

    const feather_dtype dts[2] = {FEATHER_F16, FEATHER_BF16};
    const char *sep = "------------------------------------------------------------------------------";
    printf("%s\n%-5s %-6s %-7s %-7s %-6s %3s %9s %9s %9s\n%-42s %9s %9s %9s\n%s\n", sep, "src", "fp8",
           "scale", "simd", "layout", "thr", "GB/s wall", "GB/s cpu", "GB/s cpu", "", "best", "best",
           "median", sep);
    for (int d = 0; d < 2; d++) {
        for (size_t i = 0; i < nk; i++) {
            uint16_t h = dts[d] == FEATHER_F16 ? feather_f32_to_f16(master[i]) : feather_f32_to_bf16(master[i]);
            for (int t = 0; t < tensors; t++) w16[t][i] = h;
        }
        for (int f = 0; f < 2; f++) {
            for (int sc = 0; sc < 2; sc++) {
                if (quick && (f == 1 || sc == 1) && d == 1) continue;
                feather_quant_options o = {.format = (feather_fp8)f,
                                           .mode = sc ? FEATHER_SCALE_TENSOR : FEATHER_SCALE_NONE};
                /* tensor scale: absmax / fp8 max, not a power of two, so the multiply matters */
                float s = sc ? 0.0937f / feather_fp8_max(o.format) : 1.0f;
                for (int ti = 0; ti < nthr; ti++) {
                    feather_ctx *ctx = feather_ctx_new(thr[ti]);
                    if (!ctx) return 2;
                    for (int packed = 0; packed < 2; packed++) {
                        /* the levels take turns round by round, so a busy spell on the shared
                         * machine hits them alike */
                        double wall[3][MAX_REPS], cpu[3][MAX_REPS];
                        for (int r = 0; r < reps; r++) {
                            for (int lv = 0; lv <= (int)feather_simd_detect(); lv++) {
                                if (!want_lv[lv] || (quick && lv == 0 && thr[ti] > 1)) continue;
                                feather_ctx_set_simd(ctx, (feather_simd)lv);
                                double t0 = now(), c0 = cpu_now();
                                for (int t = 0; t < tensors; t++) {
                                    feather_error err;
                                    if (feather_quantize_with(ctx, &o, dts[d], w16[t], n, k, &s, packed,
                                                              out[t], NULL, &err) != FEATHER_OK) {
                                        fprintf(stderr, "quant_bench: %s\n", err.message);
                                        return 2;
                                    }
                                }
                                wall[lv][r] = now() - t0;
                                cpu[lv][r] = cpu_now() - c0;
                            }
                        }
                        for (int lv = 0; lv <= (int)feather_simd_detect(); lv++) {
                            if (!want_lv[lv] || (quick && lv == 0 && thr[ti] > 1)) continue;
                            double bytes = tensors * (double)nk * 2;
                            qsort(wall[lv], (size_t)reps, sizeof(double), cmp_double);
                            qsort(cpu[lv], (size_t)reps, sizeof(double), cmp_double);
                            printf("%-5s %-6s %-7s %-7s %-6s %3d %9.2f %9.2f %9.2f\n", feather_dtype_name(dts[d]),
                                   feather_fp8_name(o.format), sc ? "tensor" : "none",
                                   feather_simd_name((feather_simd)lv), packed ? "packed" : "plain",
                                   thr[ti], bytes / wall[lv][0] / 1e9, bytes / cpu[lv][0] / 1e9,
                                   bytes / cpu[lv][reps / 2] / 1e9);
                        }
                        fflush(stdout);
                    }
                    feather_ctx_free(ctx);
                }
            }
        }
    }

    /* layout conversion alone */
    {
        double bp = 1e30, bu = 1e30;
        for (int r = 0; r < reps; r++) {
            double c0 = cpu_now();
            for (int t = 0; t + 1 < tensors; t += 2) feather_pack(out[t], n, k, out[t + 1]);
            double dc = cpu_now() - c0;
            if (dc < bp) bp = dc;
            c0 = cpu_now();
            for (int t = 0; t + 1 < tensors; t += 2) feather_unpack(out[t + 1], n, k, out[t]);
            dc = cpu_now() - c0;
            if (dc < bu) bu = dc;
        }
        double bytes = (double)(tensors / 2) * (double)nk;
        if (tensors >= 2)
            printf("%s\nfeather_pack %.2f GB/s, feather_unpack %.2f GB/s (bytes moved per CPU second, 1 thread)\n",
                   sep, bytes / bp / 1e9, bytes / bu / 1e9);
    }

    /* statistics cost (F16 → e5m2, tensor scale, packed) */
    {
        feather_ctx *ctx = feather_ctx_new(1);
        feather_quant_options o = {.format = FEATHER_FP8_E5M2, .mode = FEATHER_SCALE_TENSOR};
        float s = 0.0937f / FEATHER_E5M2_MAX;
        for (size_t i = 0; i < nk; i++) w16[0][i] = feather_f32_to_f16(master[i]);
        printf("%s\nwith statistics (F16 -> e5m2, tensor scale, packed, 1 thread, 1 tensor):\n", sep);
        for (int lv = 0; lv <= (int)feather_simd_detect(); lv++) {
            if (!want_lv[lv]) continue;
            feather_ctx_set_simd(ctx, (feather_simd)lv);
            double best = 1e30, best_cpu = 1e30;
            feather_quant_stats st;
            for (int r = 0; r < reps; r++) {
                double t0 = now(), c0 = cpu_now();
                feather_quantize_with(ctx, &o, FEATHER_F16, w16[0], n, k, &s, 1, out[0], &st, NULL);
                double dt = now() - t0, dc = cpu_now() - c0;
                if (dt < best) best = dt;
                if (dc < best_cpu) best_cpu = dc;
            }
            printf("  %-7s %6.2f GB/s wall, %6.2f GB/s cpu (relative error %.3e)\n",
                   feather_simd_name((feather_simd)lv), nk * 2.0 / best / 1e9, nk * 2.0 / best_cpu / 1e9,
                   sqrt(st.err_sq / st.sum_sq));
        }
        feather_ctx_free(ctx);
    }
    for (int t = 0; t < tensors; t++) {
        free(w16[t]);
        free(out[t]);
    }
    free(w16);
    free(out);
    free(master);
    return 0;
}

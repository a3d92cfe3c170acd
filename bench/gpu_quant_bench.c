/* GPU-assisted quantisation: host memory → host memory throughput of feather_quantize_on on
 * Flux-sized weights, against the CPU, with the pieces that bound it measured alone.
 *
 *   gpu_quant_bench [--reps R] [--threads T] [--shapes NxK,...] [--modes M,...] [--quick]
 *
 * For every 16-bit dtype (bf16, f16), shape (default 3072x3072, 3072x12288, 12288x3072) and
 * scale mode (default block:128, channel, tensor), e5m2 packed without statistics (what
 * `feather-convert -q` asks for): GB/s of 16-bit input, best of R calls, through
 *   - "gpu": ordinary (pageable) w and q, as a caller hands them over: the weights are copied by
 *     the host threads into page-locked staging, uploaded, searched and cast, downloaded and
 *     copied out, chunk by chunk, overlapped;
 *   - "gpu pinned": w and q page-locked (feather_host_alloc): no host copies;
 *   - "cpu": feather_quantize on the same threads;
 * and checks that the GPU's bytes and scales equal the CPU's. Then, for the largest shape:
 * the ablation (host copies with the threads, one upload, one download, both at once, the
 * kernels alone on device-resident data), a pipeline chunk-size sweep and the cost of the
 * statistics. */
#include "feather/feather.h"
#include "gpu_host.h"
#include "internal.h"

#ifdef FEATHER_GPU
#include "../kernels/fk_api.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

typedef struct shape {
    uint64_t n, k;
} shape;

static int reps = 5;
static feather_ctx *ctx;

/* Best time of reps calls (one more first, unmeasured: allocations, first touch). */
static double best_of(feather_device dev, const feather_quant_options *o, feather_dtype dt, const void *w, uint64_t n,
                      uint64_t k, uint8_t *q, float *s, feather_quant_stats *st, int r) {
    double best = 1e30;
    feather_error err = {0};
    for (int i = 0; i <= r; i++) {
        double t0 = now();
        if (feather_quantize_on(ctx, dev, o, dt, w, n, k, 1, q, s, st, &err)) {
            fprintf(stderr, "gpu_quant_bench: %s\n", err.message);
            exit(2);
        }
        double t = now() - t0;
        if (i && t < best) best = t;
    }
    return best;
}

#ifdef FEATHER_GPU
typedef struct cp {
    uint8_t *dst;
    const uint8_t *src;
    size_t len;
} cp;
static void copy_fn(void *arg, size_t b, size_t e, int w) {
    (void)w;
    cp *c = arg;
    for (size_t i = b; i < e; i++) memcpy(c->dst + i * c->len, c->src + i * c->len, c->len);
}
/* GB/s of a copy of len bytes by the context's threads in 1 MiB pieces. */
static double host_copy(uint8_t *dst, const uint8_t *src, size_t len) {
    cp c = {dst, src, (size_t)1 << 20};
    double best = 1e30;
    for (int i = 0; i <= reps; i++) {
        double t0 = now();
        feather_parallel_for(ctx, len / c.len, 1, copy_fn, &c);
        double t = now() - t0;
        if (i && t < best) best = t;
    }
    return (double)(len / c.len * c.len) / best / 1e9;
}

#define FK(call)                                                                                  \
    do {                                                                                          \
        int rc_ = (call);                                                                         \
        if (rc_) {                                                                                \
            fprintf(stderr, "gpu_quant_bench: %s: %s\n", #call, fk_error_string(rc_));            \
            exit(2);                                                                              \
        }                                                                                         \
    } while (0)

/* Copies and kernels alone, on one weight already in memory. */
static void ablation(feather_dtype dt, uint64_t n, uint64_t k, const void *w) {
    size_t in = n * k * 2, out = n * k;
    void *h_in, *h_out, *d_in, *d_out, *d_sc, *d_misc, *d_ratio, *d_hist, *s1, *s2;
    FK(fk_host_alloc(&h_in, in));
    FK(fk_host_alloc(&h_out, out));
    FK(fk_malloc(&d_in, in));
    FK(fk_malloc(&d_out, out));
    FK(fk_malloc(&d_sc, n * k / 16 * 4 + 4));
    FK(fk_malloc(&d_misc, 64));
    FK(fk_malloc(&d_ratio, 256 * 4));
    FK(fk_malloc(&d_hist, 2 * 32768 * 8));
    FK(fk_stream_create(&s1));
    FK(fk_stream_create(&s2));
    memcpy(h_in, w, in);
    uint8_t *pageable = malloc(in);
    memset(pageable, 1, in);
    printf("ablation, %s %llux%llu (%.1f MB in, %.1f MB out), %d host threads:\n", feather_dtype_name(dt),
           (unsigned long long)n, (unsigned long long)k, in / 1e6, out / 1e6, feather_ctx_threads(ctx));
    printf("  host copy pageable -> page-locked      %7.2f GB/s\n", host_copy(h_in, w, in));
    printf("  host copy page-locked -> pageable      %7.2f GB/s\n", host_copy(pageable, h_out, out));
    memcpy(h_in, w, in);
    double b_up = 1e30, b_down = 1e30, b_both = 1e30;
    for (int i = 0; i <= reps; i++) {
        double t0 = now();
        FK(fk_to_device_async(d_in, h_in, in, s1));
        FK(fk_stream_sync(s1));
        double t1 = now();
        FK(fk_to_host_async(h_out, d_out, out, s2));
        FK(fk_stream_sync(s2));
        double t2 = now();
        FK(fk_to_device_async(d_in, h_in, in, s1));
        FK(fk_to_host_async(h_out, d_out, out, s2));
        FK(fk_stream_sync(s1));
        FK(fk_stream_sync(s2));
        double t3 = now();
        if (!i) continue;
        b_up = t1 - t0 < b_up ? t1 - t0 : b_up;
        b_down = t2 - t1 < b_down ? t2 - t1 : b_down;
        b_both = t3 - t2 < b_both ? t3 - t2 : b_both;
    }
    printf("  upload (page-locked, one copy)         %7.2f GB/s\n", in / b_up / 1e9);
    printf("  download (page-locked, one copy)       %7.2f GB/s\n", out / b_down / 1e9);
    printf("  upload and download at once            %7.2f ms  (%.2f GB/s of input; sum of the two alone %.2f ms)\n",
           b_both * 1e3, in / b_both / 1e9, (b_up + b_down) * 1e3);
    float r[16];
    feather_grid_ratios(16, r);
    FK(fk_to_device(d_ratio, r, sizeof r));
    fk_quant_params p = {.w = d_in, .dtype = dt == FEATHER_F16 ? FK_DT_F16 : FK_DT_BF16, .rows = (int64_t)n,
                         .k = (int64_t)k, .nr = 16, .ratios = d_ratio, .scales = d_sc, .q = d_out, .packed = 1,
                         .nonfinite = d_misc, .amax_bits = (unsigned *)((char *)d_misc + 8), .hist = d_hist, .scale = 0.01f};
    const char *names[] = {"search+cast block:128", "search+cast channel", "histogram (tensor)", "cast, one scale"};
    for (int m = 0; m < 4; m++) {
        p.group = m == 0 ? 128 : (int64_t)k;
        double best = 1e30;
        for (int i = 0; i <= reps; i++) {
            FK(fk_synchronize());
            double t0 = now();
            if (m < 2) FK(fk_quant_search_cast(&p, s1));
            else if (m == 2) FK(fk_quant_hist(&p, s1));
            else FK(fk_quant_cast(&p, s1));
            FK(fk_stream_sync(s1));
            double t = now() - t0;
            if (i && t < best) best = t;
        }
        printf("  kernel: %-28s %7.2f GB/s of input (%.3f ms)\n", names[m], in / best / 1e9, best * 1e3);
    }
    free(pageable);
    fk_stream_destroy(s1);
    fk_stream_destroy(s2);
    fk_host_free(h_in);
    fk_host_free(h_out);
    fk_free(d_in), fk_free(d_out), fk_free(d_sc), fk_free(d_misc), fk_free(d_ratio), fk_free(d_hist);
}
#endif

int main(int argc, char **argv) {
    shape shapes[8] = {{3072, 3072}, {3072, 12288}, {12288, 3072}};
    int nsh = 3, threads = 0, quick = 0;
    const char *modes_arg = "block:128,channel,tensor";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--modes") && i + 1 < argc) modes_arg = argv[++i];
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--shapes") && i + 1 < argc) {
            nsh = 0;
            for (char *t = strtok(argv[++i], ","); t && nsh < 8; t = strtok(NULL, ",")) {
                unsigned long long a, b;
                if (sscanf(t, "%llux%llu", &a, &b) != 2 || b % 128) return 64;
                shapes[nsh++] = (shape){a, b};
            }
        } else {
            fprintf(stderr, "usage: %s [--reps R] [--threads T] [--shapes NxK,...] [--modes M,...] [--quick]\n", argv[0]);
            return 64;
        }
    }
    if (reps < 1 || !nsh) return 64;
    char desc[256];
    int gpu = feather_gpu_available(desc, sizeof desc);
    ctx = feather_ctx_new(threads);
    printf("gpu_quant_bench: device %s; %d host threads; best of %d calls; e5m2, packed, no statistics\n", desc,
           feather_ctx_threads(ctx), reps);
    if (!gpu) {
        printf("no usable GPU: nothing to measure\n");
        return 0;
    }
    feather_quant_options modes[8];
    int nm = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", modes_arg);
    for (char *t = strtok(buf, ","); t && nm < 8; t = strtok(NULL, ",")) {
        memset(&modes[nm], 0, sizeof modes[nm]);
        modes[nm].format = FEATHER_FP8_E5M2;
        if (feather_scale_parse(t, &modes[nm].mode, &modes[nm].group, NULL)) return 64;
        nm++;
    }
    uint64_t maxnk = 0;
    for (int s = 0; s < nsh; s++) maxnk = shapes[s].n * shapes[s].k > maxnk ? shapes[s].n * shapes[s].k : maxnk;
    float *master = malloc(maxnk * 4);
    uint16_t *w = malloc(maxnk * 2);
    uint16_t *wp = feather_host_alloc(maxnk * 2);
    uint8_t *q = malloc(maxnk), *qc = malloc(maxnk), *qp = feather_host_alloc(maxnk);
    float *sc = malloc(maxnk / 16 * 4 + 4), *scc = malloc(maxnk / 16 * 4 + 4);
    if (!master || !w || !wp || !q || !qc || !qp || !sc || !scc) return 2;
    for (uint64_t i = 0; i < maxnk; i++) master[i] = (float)(gauss() * 0.02);
    memset(q, 0, maxnk);
    memset(qc, 0, maxnk);
    printf("%-5s %-12s %-10s %9s %11s %9s %7s %s\n", "dtype", "shape", "mode", "gpu GB/s", "pinned GB/s", "cpu GB/s",
           "gpu/cpu", "bytes");
    feather_dtype dts[2] = {FEATHER_BF16, FEATHER_F16};
    for (int d = 0; d < 2; d++)
        for (int s = 0; s < nsh; s++) {
            uint64_t n = shapes[s].n, k = shapes[s].k, nk = n * k;
            for (uint64_t i = 0; i < nk; i++)
                w[i] = dts[d] == FEATHER_BF16 ? feather_f32_to_bf16(master[i]) : feather_f32_to_f16(master[i]);
            memcpy(wp, w, nk * 2);
            for (int m = 0; m < nm; m++) {
                char mb[32], sh[32];
                double tg = best_of(FEATHER_DEVICE_GPU, &modes[m], dts[d], w, n, k, q, sc, NULL, reps);
                double tp = best_of(FEATHER_DEVICE_GPU, &modes[m], dts[d], wp, n, k, qp, sc, NULL, reps);
                double tc = best_of(FEATHER_DEVICE_CPU, &modes[m], dts[d], w, n, k, qc, scc, NULL, quick ? 1 : 2);
                uint64_t ns = feather_scale_count(&modes[m], n, k);
                int same = !memcmp(q, qc, nk) && !memcmp(qp, qc, nk) && !memcmp(sc, scc, ns * 4);
                snprintf(sh, sizeof sh, "%llux%llu", (unsigned long long)n, (unsigned long long)k);
                printf("%-5s %-12s %-10s %9.2f %11.2f %9.2f %7.1f %s\n", feather_dtype_name(dts[d]), sh,
                       feather_scale_format(modes[m].mode, modes[m].group, mb, sizeof mb), nk * 2 / tg / 1e9,
                       nk * 2 / tp / 1e9, nk * 2 / tc / 1e9, tc / tg, same ? "identical" : "DIFFERENT");
                fflush(stdout);
            }
        }
    /* the largest shape in bf16: where the time goes */
    uint64_t n = shapes[0].n, k = shapes[0].k;
    for (int s = 1; s < nsh; s++)
        if (shapes[s].n * shapes[s].k > n * k) n = shapes[s].n, k = shapes[s].k;
    for (uint64_t i = 0; i < n * k; i++) w[i] = feather_f32_to_bf16(master[i]);
#ifdef FEATHER_GPU
    ablation(FEATHER_BF16, n, k, w);
#endif
    feather_quant_options o = {.format = FEATHER_FP8_E5M2, .mode = FEATHER_SCALE_BLOCK, .group = 128};
    printf("pipeline chunk size, block:128, pageable w and q (per call: chunks; ms copying on the host, waiting\n"
           "for the GPU, queueing GPU work; all):\n");
    const size_t chunks[] = {1, 2, 4, 8, 16, 32};
    for (int small = 0; small < 2; small++) {
        uint64_t sn = small ? 3072 : n, sk = small ? 3072 : k;
        for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
            feather_gpu_quant_set_chunk(chunks[c] << 20);
            feather_gpu_quant_prof pr;
            best_of(FEATHER_DEVICE_GPU, &o, FEATHER_BF16, w, sn, sk, q, sc, NULL, 0); /* allocations */
            feather_gpu_quant_profile(NULL, 1);
            double t = best_of(FEATHER_DEVICE_GPU, &o, FEATHER_BF16, w, sn, sk, q, sc, NULL, reps);
            feather_gpu_quant_profile(&pr, 1);
            double nc = (double)(pr.calls ? pr.calls : 1);
            printf("  bf16 %llux%llu, chunks of at most %2zu MiB: %7.2f GB/s  (%.1f chunks; %.3f copy, %.3f wait, "
                   "%.3f queue, %.3f ms)\n",
                   (unsigned long long)sn, (unsigned long long)sk, chunks[c], sn * sk * 2 / t / 1e9, pr.chunks / nc,
                   pr.copy_s / nc * 1e3, pr.wait_s / nc * 1e3, pr.enqueue_s / nc * 1e3, pr.total_s / nc * 1e3);
        }
    }
    feather_gpu_quant_set_chunk(0);
    feather_quant_stats st;
    double t0 = best_of(FEATHER_DEVICE_GPU, &o, FEATHER_BF16, w, n, k, q, sc, NULL, reps);
    double t1 = best_of(FEATHER_DEVICE_GPU, &o, FEATHER_BF16, w, n, k, q, sc, &st, reps);
    printf("statistics (SNR sums) on the GPU: %.2f GB/s with, %.2f GB/s without\n", n * k * 2 / t1 / 1e9,
           n * k * 2 / t0 / 1e9);
    feather_host_free(wp);
    feather_host_free(qp);
    feather_gpu_release();
    feather_ctx_free(ctx);
    return 0;
}

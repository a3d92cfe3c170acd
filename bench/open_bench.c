/*
 * Reader open benchmark: a sparse 40 GB checkpoint shaped like a Flux transformer (32 double and
 * 64 single blocks of Flux.1's shapes, BF16, 1300 tensors; only the header is written, the data
 * is a hole), timed for
 *   - feather_check_header on the header in memory,
 *   - feather_open header-only + listing every tensor (name lookup, sizes),
 *   - feather_open with the data mapped + listing,
 * then the same for a header of 100,000 small tensors (a large but legal header).
 *
 *   make bench && build/bench/open_bench [DIR] [REPEATS] [keep]
 *
 * DIR defaults to $TMPDIR or /tmp; the files are removed at the end unless "keep" is given
 * (to time whole commands on them, e.g. feather-verify --info).
 */
#include "feather/feather.h"

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct gen {
    char *json;
    size_t len, cap;
    uint64_t offset;
    size_t ntensors;
} gen;

static void put(gen *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(gen *g, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(g->json + g->len, g->cap - g->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < g->cap - g->len) {
            g->len += (size_t)n;
            return;
        }
        g->cap = g->cap * 2 + (size_t)n + 1;
        if (!(g->json = realloc(g->json, g->cap))) {
            perror("realloc");
            exit(2);
        }
    }
}

static void tensor(gen *g, const char *dtype, unsigned bytes_per, const char *name, uint64_t a,
                   uint64_t b) {
    uint64_t n = (b ? a * b : a) * bytes_per;
    put(g, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%llu", g->ntensors ? "," : "", name, dtype,
        (unsigned long long)a);
    if (b) put(g, ",%llu", (unsigned long long)b);
    put(g, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)g->offset,
        (unsigned long long)(g->offset + n));
    g->offset += n;
    g->ntensors++;
}

/* Linear layer "prefix.weight" [out, in] and "prefix.bias" [out], BF16. */
static void linear(gen *g, const char *prefix, uint64_t out, uint64_t in) {
    char name[256];
    snprintf(name, sizeof name, "%s.bias", prefix);
    tensor(g, "BF16", 2, name, out, 0);
    snprintf(name, sizeof name, "%s.weight", prefix);
    tensor(g, "BF16", 2, name, out, in);
}

static void flux(gen *g, int ndouble, int nsingle) {
    const uint64_t h = 3072, mlp = 12288;
    char p[256];
    put(g, "{\"__metadata__\":{\"format\":\"pt\"}");
    g->ntensors = 1; /* a comma before the first tensor */
    for (int i = 0; i < ndouble; i++) {
        for (int s = 0; s < 2; s++) {
            const char *side = s ? "txt" : "img";
            snprintf(p, sizeof p, "double_blocks.%d.%s_attn.norm.key_norm.scale", i, side);
            tensor(g, "BF16", 2, p, 128, 0);
            snprintf(p, sizeof p, "double_blocks.%d.%s_attn.norm.query_norm.scale", i, side);
            tensor(g, "BF16", 2, p, 128, 0);
            snprintf(p, sizeof p, "double_blocks.%d.%s_attn.proj", i, side);
            linear(g, p, h, h);
            snprintf(p, sizeof p, "double_blocks.%d.%s_attn.qkv", i, side);
            linear(g, p, 3 * h, h);
            snprintf(p, sizeof p, "double_blocks.%d.%s_mlp.0", i, side);
            linear(g, p, mlp, h);
            snprintf(p, sizeof p, "double_blocks.%d.%s_mlp.2", i, side);
            linear(g, p, h, mlp);
            snprintf(p, sizeof p, "double_blocks.%d.%s_mod.lin", i, side);
            linear(g, p, 6 * h, h);
        }
    }
    for (int i = 0; i < nsingle; i++) {
        snprintf(p, sizeof p, "single_blocks.%d.linear1", i);
        linear(g, p, 3 * h + mlp, h);
        snprintf(p, sizeof p, "single_blocks.%d.linear2", i);
        linear(g, p, h, h + mlp);
        snprintf(p, sizeof p, "single_blocks.%d.modulation.lin", i);
        linear(g, p, 3 * h, h);
        snprintf(p, sizeof p, "single_blocks.%d.norm.key_norm.scale", i);
        tensor(g, "BF16", 2, p, 128, 0);
        snprintf(p, sizeof p, "single_blocks.%d.norm.query_norm.scale", i);
        tensor(g, "BF16", 2, p, 128, 0);
    }
    linear(g, "img_in", h, 64);
    linear(g, "txt_in", h, 4096);
    linear(g, "time_in.in_layer", h, 256);
    linear(g, "time_in.out_layer", h, h);
    linear(g, "vector_in.in_layer", h, 768);
    linear(g, "vector_in.out_layer", h, h);
    linear(g, "guidance_in.in_layer", h, 256);
    linear(g, "guidance_in.out_layer", h, h);
    linear(g, "final_layer.adaLN_modulation.1", 2 * h, h);
    linear(g, "final_layer.linear", 64, h);
    put(g, "}");
    g->ntensors--;
}

static void many_small(gen *g, int n) {
    put(g, "{");
    char name[64];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "layers.%d.weight", i);
        tensor(g, "F32", 4, name, 16, 16);
    }
    put(g, "}");
}

/* Writes 8-byte N + header (padded with spaces to 8) and extends the file to its full size
 * without writing the data. */
static uint8_t *write_sparse(const char *path, gen *g, size_t *buf_len) {
    while (g->len % 8) put(g, " ");
    size_t n = 8 + g->len;
    uint8_t *buf = malloc(n);
    if (!buf) exit(2);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)g->len >> (8 * i));
    memcpy(buf + 8, g->json, g->len);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0 || write(fd, buf, n) != (ssize_t)n || ftruncate(fd, (off_t)(n + g->offset)) ||
        close(fd)) {
        perror(path);
        exit(2);
    }
    *buf_len = n;
    return buf;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Opens and lists every tensor; returns the listed bytes (so nothing is optimised away). */
static uint64_t open_and_list(const char *path, unsigned flags) {
    feather_reader *r;
    feather_error e;
    if (feather_open(&r, path, flags, &e)) {
        fprintf(stderr, "%s\n", e.message);
        exit(2);
    }
    uint64_t total = 0;
    for (size_t i = 0; i < feather_count(r); i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        if (feather_find(r, t->name) != t) exit(3);
        total += t->nbytes;
    }
    feather_close(r);
    return total;
}

typedef struct result { double min, median; } result;

static result timeit(int repeats, const char *path, const uint8_t *buf, size_t len,
                     uint64_t file_size, int mode) {
    double *ms = malloc((size_t)repeats * sizeof *ms);
    feather_error e;
    for (int i = 0; i < repeats; i++) {
        double t0 = now_ms();
        if (mode == 0 && feather_check_header(buf, len, file_size, path, &e)) {
            fprintf(stderr, "%s\n", e.message);
            exit(3);
        }
        if (mode == 1) open_and_list(path, FEATHER_OPEN_HEADER_ONLY);
        if (mode == 2) open_and_list(path, 0);
        ms[i] = now_ms() - t0;
    }
    qsort(ms, (size_t)repeats, sizeof *ms, cmp_d);
    result r = {ms[0], ms[repeats / 2]};
    free(ms);
    return r;
}

static void run(const char *label, const char *path, gen *g, int repeats, int keep) {
    size_t len;
    uint8_t *buf = write_sparse(path, g, &len);
    uint64_t listed = open_and_list(path, FEATHER_OPEN_HEADER_ONLY);
    printf("%s: %zu tensors, header %zu bytes, data %.2f GB (listed %.2f GB)\n", label,
           g->ntensors, g->len, g->offset / 1e9, listed / 1e9);
    static const char *what[] = {"feather_check_header (in memory)",
                                 "feather_open header-only + list",
                                 "feather_open mapped + list"};
    for (int m = 0; m < 3; m++) {
        result r = timeit(repeats, path, buf, len, len + g->offset, m);
        printf("  %-36s min %8.3f ms  median %8.3f ms  (%d runs)\n", what[m], r.min, r.median,
               repeats);
    }
    free(buf);
    if (keep) printf("  kept %s\n", path);
    else unlink(path);
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : getenv("TMPDIR");
    int repeats = argc > 2 ? atoi(argv[2]) : 20;
    int keep = argc > 3 && !strcmp(argv[3], "keep");
    if (!dir || !*dir) dir = "/tmp";
    if (repeats < 1) repeats = 1;
    char path[4096];
    gen g = {0};
    snprintf(path, sizeof path, "%s/feather-open-bench-flux.safetensors", dir);
    flux(&g, 32, 64);
    run("flux-shaped (32 double + 64 single blocks, BF16)", path, &g, repeats, keep);
    free(g.json);
    memset(&g, 0, sizeof g);
    snprintf(path, sizeof path, "%s/feather-open-bench-many.safetensors", dir);
    many_small(&g, 100000);
    run("100,000 tensors F32 [16, 16]", path, &g, repeats, keep);
    free(g.json);
    return 0;
}

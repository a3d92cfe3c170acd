/* Copy throughput of the safetensors writer.
 *
 *   copy_bench [options] IN OUT      copies every tensor of IN through the reader and the
 *                                    writer, unchanged, and prints the time and rate
 *   copy_bench --generate GIB OUT    writes a synthetic F16/BF16 model of about GIB GiB
 *
 * Options: --no-hash-check (reader does not check recorded hashes), --no-hashes (writer
 * records none), --zstd-level N, --zstd-threads N (for an OUT ending in .zst).
 *
 * The output lists the tensors in the input's order. The time covers everything from
 * feather_open to the end of feather_writer_commit, which includes the final fsync, so it is
 * comparable with `dd ... conv=fsync`. */
#include "feather/feather.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "bench_util.h"

static int fail(const feather_error *err) {
    fprintf(stderr, "copy_bench: %s\n", err->message);
    return 2;
}

/* Synthetic checkpoint: 64 MiB tensors (and a few small ones) of pseudo-random halves. */
static int generate(double gib, const char *out) {
    feather_error err = {0};
    feather_write_options o = {.overwrite = 1};
    feather_writer *w;
    if (feather_writer_open(&w, out, &o, &err)) return fail(&err);
    uint64_t total = (uint64_t)(gib * (double)(1ull << 30));
    size_t nbig = (size_t)(total / (64ull << 20));
    char name[64];
    for (size_t i = 0; i < nbig; i++) {
        uint64_t shape[2] = {4096, 8192};
        snprintf(name, sizeof name, "model.layers.%zu.mlp.weight", i);
        if (feather_writer_tensor(w, name, i % 2 ? FEATHER_F16 : FEATHER_BF16, 2, shape, &err))
            return fail(&err);
        uint64_t small[1] = {4096};
        snprintf(name, sizeof name, "model.layers.%zu.norm.weight", i);
        if (feather_writer_tensor(w, name, FEATHER_F32, 1, small, &err)) return fail(&err);
    }
    if (feather_writer_metadata(w, "format", "pt", &err) || feather_writer_begin(w, &err))
        return fail(&err);
    size_t chunk = 16u << 20;
    uint16_t *buf = malloc(chunk);
    uint64_t x = 0x9e3779b97f4a7c15ull, left = 0;
    for (size_t i = 0; i < feather_writer_count(w); i++) left += feather_writer_nbytes_at(w, i);
    while (left) {
        size_t n = left < chunk ? (size_t)left : chunk;
        for (size_t k = 0; k < n / 2; k++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            /* Values of modest magnitude, like weights: sign, small exponent, random mantissa. */
            buf[k] = (uint16_t)((x & 0x83ff) | 0x2c00);
        }
        if (feather_writer_write(w, buf, n, &err)) return fail(&err);
        left -= n;
    }
    free(buf);
    if (feather_writer_commit(w, &err)) return fail(&err);
    return 0;
}

int main(int argc, char **argv) {
    unsigned flags = 0;
    feather_write_options o = {.overwrite = 1};
    int i = 1;
    for (; i < argc && !strncmp(argv[i], "--", 2); i++) {
        if (!strcmp(argv[i], "--generate") && i + 2 < argc) return generate(atof(argv[i + 1]), argv[i + 2]);
        else if (!strcmp(argv[i], "--no-hash-check")) flags |= FEATHER_OPEN_NO_HASH_CHECK;
        else if (!strcmp(argv[i], "--no-hashes")) o.no_hashes = 1;
        else if (!strcmp(argv[i], "--zstd-level") && i + 1 < argc) o.zstd_level = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--zstd-threads") && i + 1 < argc) o.zstd_threads = atoi(argv[++i]);
        else break;
    }
    if (argc - i != 2) {
        fprintf(stderr, "usage: copy_bench [--no-hash-check] [--no-hashes] [--zstd-level N] "
                        "[--zstd-threads N] IN OUT\n       copy_bench --generate GIB OUT\n");
        return 64;
    }
    const char *in = argv[i], *out = argv[i + 1];
    const char *inputs[] = {in};
    o.inputs = inputs;
    o.ninputs = 1;
    feather_error err = {0};
    double t0 = now();
    feather_reader *r;
    if (feather_open(&r, in, flags, &err)) return fail(&err);
    feather_writer *w;
    if (feather_writer_open(&w, out, &o, &err)) return fail(&err);
    for (size_t k = 0; k < feather_metadata_count(r, 0); k++) {
        const char *key = feather_metadata_key(r, 0, k);
        if (!strcmp(key, FEATHER_HASH_KEY)) continue; /* the writer records its own */
        if (feather_writer_metadata(w, key, feather_metadata_value(r, 0, k), &err))
            return fail(&err);
    }
    for (size_t k = 0; k < feather_count(r); k++) {
        const feather_tensor *t = feather_tensor_at(r, k);
        if (feather_writer_tensor(w, t->name, t->dtype, t->ndim, t->shape, &err)) return fail(&err);
    }
    if (feather_writer_begin(w, &err)) return fail(&err);
    uint64_t bytes = 0;
    size_t count = feather_writer_count(w);
    /* The output keeps the input's order (no feather_writer_sort), so the input is read
     * front to back: tensor k is paged in ahead while k-1 is written, and dropped from this
     * process's mapping once written. */
    for (size_t k = 0; k < count; k++) {
        const feather_tensor *t = feather_find(r, feather_writer_name_at(w, k));
        const void *data;
        if (!t || feather_tensor_data(r, t, &data, &err)) {
            if (!t) snprintf(err.message, sizeof err.message, "%s: tensor vanished", in);
            feather_writer_abort(w);
            return fail(&err);
        }
        if (k + 1 < count) {
            const feather_tensor *next = feather_find(r, feather_writer_name_at(w, k + 1));
            if (next) feather_tensor_prefetch(r, next);
        }
        if (feather_writer_write(w, data, t->nbytes, &err)) {
            feather_writer_abort(w);
            return fail(&err);
        }
        feather_tensor_release(r, t);
        bytes += t->nbytes;
    }
    if (feather_writer_commit(w, &err)) return fail(&err);
    feather_close(r);
    double dt = now() - t0;
    printf("copied %zu tensors, %.3f GB of data in %.3f s: %.1f MB/s\n", count,
           (double)bytes / 1e9, dt, (double)bytes / 1e6 / dt);
    return 0;
}

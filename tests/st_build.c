#include "st_build.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

stb_buf stb_raw(uint64_t n, const char *hdr, size_t hlen, size_t data_len) {
    stb_buf b = {malloc(8 + hlen + data_len + 1), 8 + hlen + data_len};
    if (!b.p) abort();
    for (int i = 0; i < 8; i++) b.p[i] = (uint8_t)(n >> (8 * i));
    if (hlen) memcpy(b.p + 8, hdr, hlen);
    for (size_t i = 0; i < data_len; i++) b.p[8 + hlen + i] = (uint8_t)(i * 7 + 3);
    return b;
}

stb_buf stb_file(const char *hdr, size_t hlen, size_t data_len) {
    return stb_raw(hlen, hdr, hlen, data_len);
}

void stb_free(stb_buf *b) {
    free(b->p);
    b->p = NULL;
    b->len = 0;
}

int stb_write(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return (fclose(f) || w != n) ? -1 : 0;
}

void stb_corpus(const char *name, const stb_buf *b) {
    const char *dir = getenv("FEATHER_CORPUS_OUT");
    char path[1024];
    if (!dir) return;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (stb_write(path, b->p, b->len)) fprintf(stderr, "cannot write %s\n", path);
}

uint8_t *stb_read(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc((size_t)n + 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return p;
}

static unsigned dtype_bits(const char *d) {
    if (!strcmp(d, "F4")) return 4;
    if (!strncmp(d, "F6", 2)) return 6;
    if (strstr(d, "64")) return 64;
    if (strstr(d, "32")) return 32;
    if (strstr(d, "16")) return 16;
    return 8;
}

static uint64_t tensor_bytes(const stb_tensor *t) {
    uint64_t n = dtype_bits(t->dtype);
    for (unsigned i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n / 8;
}

/* Appends printf output to a growing string. */
static void cat(char **s, size_t *len, size_t *cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void cat(char **s, size_t *len, size_t *cap, const char *fmt, ...) {
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(*s + *len, *cap - *len, fmt, ap);
        va_end(ap);
        if ((size_t)n < *cap - *len) {
            *len += (size_t)n;
            return;
        }
        *cap = (*cap + (size_t)n) * 2;
        *s = realloc(*s, *cap);
        if (!*s) abort();
    }
}

stb_buf stb_model(const stb_tensor *t, size_t n, const char *meta, int hashes, unsigned seed) {
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += tensor_bytes(&t[i]);
    uint8_t *data = malloc(total + 1);
    if (!data) abort();
    for (uint64_t i = 0; i < total; i++) data[i] = (uint8_t)((i * 131 + seed * 17) >> 1);
    size_t cap = 256, len = 0;
    char *h = malloc(cap);
    if (!h) abort();
    h[0] = 0;
    cat(&h, &len, &cap, "{");
    if (meta || hashes) {
        cat(&h, &len, &cap, "\"__metadata__\":{%s", meta ? meta : "");
        if (hashes) {
            cat(&h, &len, &cap, "%s\"feather.xxh3\":\"{", meta && *meta ? "," : "");
            uint64_t off = 0;
            for (size_t i = 0; i < n; i++) {
                uint64_t sz = tensor_bytes(&t[i]);
                cat(&h, &len, &cap, "%s\\\"%s\\\":\\\"%016llx\\\"", i ? "," : "", t[i].name,
                    (unsigned long long)XXH3_64bits(data + off, sz));
                off += sz;
            }
            cat(&h, &len, &cap, "}\"");
        }
        cat(&h, &len, &cap, "}%s", n ? "," : "");
    }
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t sz = tensor_bytes(&t[i]);
        cat(&h, &len, &cap, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", t[i].name,
            t[i].dtype);
        for (unsigned d = 0; d < t[i].ndim; d++)
            cat(&h, &len, &cap, "%s%llu", d ? "," : "", (unsigned long long)t[i].shape[d]);
        cat(&h, &len, &cap, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
            (unsigned long long)(off + sz));
        off += sz;
    }
    cat(&h, &len, &cap, "}");
    while (len % 8) cat(&h, &len, &cap, " ");
    stb_buf b = stb_raw(len, h, len, 0);
    b.p = realloc(b.p, 8 + len + total + 1);
    if (!b.p) abort();
    memcpy(b.p + 8 + len, data, total);
    b.len = 8 + len + total;
    free(h);
    free(data);
    return b;
}

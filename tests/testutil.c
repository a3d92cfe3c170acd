#include "testutil.h"
#include "test.h"

#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

uint64_t tu_rand(uint64_t *s) {
    /* splitmix64: good enough for test data, and the same on every machine */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double tu_normal(uint64_t *s) {
    double u1 = ((tu_rand(s) >> 11) + 1) * 0x1.0p-53, u2 = (tu_rand(s) >> 11) * 0x1.0p-53;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

int tu_write_model(const char *path, const tspec *t, size_t n, uint64_t seed, const char *const *meta) {
    feather_error err = {0};
    feather_writer *w;
    feather_write_options wo = {.no_hashes = 1, .overwrite = 1};
    if (feather_writer_open(&w, path, &wo, &err)) {
        fprintf(stdout, "    writer: %s\n", err.message);
        return -1;
    }
    for (const char *const *m = meta; m && m[0]; m += 2)
        if (feather_writer_metadata(w, m[0], m[1], &err)) goto fail;
    for (size_t i = 0; i < n; i++)
        if (feather_writer_tensor(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, &err)) goto fail;
    if (feather_writer_begin(w, &err)) goto fail;
    for (size_t i = 0; i < n; i++) {
        uint64_t ne = 1;
        for (unsigned d = 0; d < t[i].ndim; d++) ne *= t[i].shape[d];
        size_t bytes = (size_t)(ne * feather_dtype_bits(t[i].dtype) / 8);
        uint8_t *buf = malloc(bytes ? bytes : 1);
        uint64_t st = seed * 1000003u + i;
        for (uint64_t e = 0; e < ne; e++) {
            double v = 0.02 * tu_normal(&st);
            switch (t[i].dtype) {
            case FEATHER_F16: ((uint16_t *)buf)[e] = feather_f32_to_f16((float)v); break;
            case FEATHER_BF16: ((uint16_t *)buf)[e] = feather_f32_to_bf16((float)v); break;
            case FEATHER_F32: ((float *)buf)[e] = (float)v; break;
            default: break;
            }
        }
        if (t[i].dtype != FEATHER_F16 && t[i].dtype != FEATHER_BF16 && t[i].dtype != FEATHER_F32)
            for (size_t b = 0; b < bytes; b++) buf[b] = (uint8_t)tu_rand(&st);
        int bad = feather_writer_write(w, buf, bytes, &err) != FEATHER_OK;
        free(buf);
        if (bad) goto fail;
    }
    if (feather_writer_commit(w, &err)) {
        fprintf(stdout, "    writer: %s\n", err.message);
        return -1;
    }
    return 0;
fail:
    fprintf(stdout, "    writer: %s\n", err.message);
    feather_writer_abort(w);
    return -1;
}

uint8_t *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    /* one byte more, zero: callers parse text files (JSON) as C strings */
    uint8_t *b = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n > 0 ? n : 0] = 0;
    fclose(f);
    if (b && len) *len = (size_t)n;
    return b;
}

int tu_files_equal(const char *a, const char *b) {
    size_t la, lb;
    uint8_t *x = tu_read_file(a, &la), *y = tu_read_file(b, &lb);
    int eq = x && y && la == lb && memcmp(x, y, la) == 0;
    free(x);
    free(y);
    return eq;
}

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#define TU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_ASAN 1
#endif
#endif

int tu_vector_upper_in_use(void) {
#if defined(__x86_64__) && !defined(TU_ASAN) /* the sanitizer's own routines leave the state in use */
    unsigned a, b, c, d;
    /* XGETBV with ECX = 1 (XINUSE) needs CPUID.(0Dh, 1):EAX[2] and an OS that enabled XSAVE */
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || __get_cpuid_max(0, NULL) < 0xd) return -1;
    __cpuid_count(0xd, 1, a, b, c, d);
    if (!(a & (1u << 2))) return -1;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
    return (lo & ((1u << 2) | (1u << 6))) != 0; /* YMM upper halves, ZMM0-15 upper halves */
#else
    return -1;
#endif
}

int tu_gpu_hopper(int sms) {
    char desc[256], count[32];
    if (!feather_gpu_available(desc, sizeof desc) || !strstr(desc, ", sm_90,") || strstr(desc, "emulated")) return 0;
    snprintf(count, sizeof count, " %d SMs", sms);
    return sms <= 0 || strstr(desc, count) != NULL;
}

int tu_write_sparse_model(const char *path, uint64_t rows, uint64_t cols) {
    char hdr[256];
    const uint64_t bytes = rows * cols * 2;
    int h = snprintf(hdr, sizeof hdr,
                     "{\"big.weight\":{\"dtype\":\"BF16\",\"shape\":[%llu,%llu],\"data_offsets\":[0,%llu]}}",
                     (unsigned long long)rows, (unsigned long long)cols, (unsigned long long)bytes);
    while (h % 8) hdr[h++] = ' ';
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)h >> (8 * i));
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int bad = fwrite(len, 1, 8, f) != 8 || fwrite(hdr, 1, (size_t)h, f) != (size_t)h;
    bad |= fflush(f) != 0 || ftruncate(fileno(f), (off_t)(8 + h + bytes)) != 0;
    return fclose(f) != 0 || bad ? -1 : 0;
}

int tu_confine_cores(int n) {
    static cpu_set_t saved;
    static int have;
    if (!have) {
        if (sched_getaffinity(0, sizeof saved, &saved) != 0) return 0;
        have = 1;
    }
    if (n == 0) {
        sched_setaffinity(0, sizeof saved, &saved);
        return 0;
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    int got = 0;
    for (int c = 0; c < CPU_SETSIZE && got < n; c++)
        if (CPU_ISSET(c, &saved)) {
            CPU_SET(c, &set);
            got++;
        }
    return sched_setaffinity(0, sizeof set, &set) == 0 ? got : 0;
}

int tu_gpu_or_skip(const char *what) {
    char desc[256], msg[400];
    if (feather_gpu_available(desc, sizeof desc)) {
        printf("    GPU: %s\n", desc);
        return 1;
    }
    snprintf(msg, sizeof msg, "*** %s NOT RUN: %s ***", what, desc);
    test_skip(msg);
    return 0;
}

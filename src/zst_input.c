/*
 * .zst input: the stream is decompressed with fixed-size buffers, either into an unlinked
 * temporary file that is then mapped like any file, or (header-only) just far enough to hold the
 * header while the rest is counted and dropped, to learn the decompressed size.
 */
#include "reader_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

/* Called with each decompressed chunk; a non-OK status stops decompression. */
typedef feather_status (*sink_fn)(void *arg, const uint8_t *p, size_t n, feather_error *err);

static feather_status read_some(int fd, void *buf, size_t cap, size_t *got, const char *path,
                                feather_error *err) {
    for (;;) {
        ssize_t r = read(fd, buf, cap);
        if (r >= 0) {
            *got = (size_t)r;
            return FEATHER_OK;
        }
        if (errno != EINTR)
            return feather_fail(err, FEATHER_E_IO, "%s: read failed: %s", path, strerror(errno));
    }
}

/* Decompresses the whole file at path through sink. Concatenated frames are one stream. */
static feather_status decompress(const char *path, sink_fn sink, void *arg, feather_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return feather_fail(err, FEATHER_E_IO, "%s: %s", path, strerror(errno));
    ZSTD_DStream *z = ZSTD_createDStream();
    size_t in_cap = ZSTD_DStreamInSize(), out_cap = ZSTD_DStreamOutSize();
    uint8_t *in = malloc(in_cap), *out = malloc(out_cap);
    feather_status st = FEATHER_OK;
    size_t last = 1; /* 0 once a frame is complete */
    uint64_t total_in = 0, total_out = 0;
    if (!z || !in || !out) {
        st = feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory for zstd", path);
        goto done;
    }
    for (;;) {
        size_t got = 0;
        if ((st = read_some(fd, in, in_cap, &got, path, err))) goto done;
        if (got == 0) break;
        total_in += got;
        ZSTD_inBuffer ib = {in, got, 0};
        while (ib.pos < ib.size) {
            if (feather_cancelled()) {
                st = feather_fail(err, FEATHER_E_CANCELLED, "%s: interrupted", path);
                goto done;
            }
            ZSTD_outBuffer ob = {out, out_cap, 0};
            last = ZSTD_decompressStream(z, &ob, &ib);
            if (ZSTD_isError(last)) {
                st = feather_fail(err, FEATHER_E_INVALID,
                                  "%s: not a valid zstd stream: %s (after %llu decompressed bytes)",
                                  path, ZSTD_getErrorName(last), (unsigned long long)total_out);
                goto done;
            }
            total_out += ob.pos;
            if (ob.pos && (st = sink(arg, out, ob.pos, err))) goto done;
        }
    }
    /* Flush what the decoder still holds (its output buffer may have been full). */
    while (last != 0 && total_in) {
        ZSTD_inBuffer ib = {in, 0, 0};
        ZSTD_outBuffer ob = {out, out_cap, 0};
        last = ZSTD_decompressStream(z, &ob, &ib);
        if (ZSTD_isError(last)) {
            st = feather_fail(err, FEATHER_E_INVALID, "%s: not a valid zstd stream: %s", path,
                              ZSTD_getErrorName(last));
            goto done;
        }
        if (ob.pos == 0) break;
        total_out += ob.pos;
        if ((st = sink(arg, out, ob.pos, err))) goto done;
    }
    if (total_in == 0)
        st = feather_fail(err, FEATHER_E_INVALID, "%s: empty file, not a zstd stream", path);
    else if (last != 0)
        st = feather_fail(err, FEATHER_E_INVALID,
                          "%s: zstd stream is truncated (after %llu decompressed bytes)", path,
                          (unsigned long long)total_out);
done:
    ZSTD_freeDStream(z);
    free(in);
    free(out);
    close(fd);
    return st;
}

/* ---- what happens to the decompressed bytes ---- */

typedef struct sink {
    const char *path, *dir;
    int fd;            /* temporary file, or -1 to count only */
    uint8_t *head;     /* the first bytes, up to 'want' */
    size_t len, cap, want; /* want: 8 until N is known, then 8 + N */
    uint64_t limit;    /* bytes the header declares (8 + N + data); UINT64_MAX until known */
    uint64_t total;
} sink;

static feather_status write_all(sink *k, const uint8_t *p, size_t n, feather_error *err) {
    while (n) {
        ssize_t w = write(k->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return feather_fail(err, FEATHER_E_IO, "%s: writing the decompressed copy in %s: %s",
                                k->path, k->dir, w < 0 ? strerror(errno) : "no progress");
        p += w;
        n -= (size_t)w;
    }
    return FEATHER_OK;
}

/* Once 8 bytes, then once the whole header, are in: checks what can be checked already. */
static feather_status check_head(sink *k, feather_error *err) {
    uint64_t n;
    if (k->want == 8) {
        /* Only the limit can fail here: the file size is not known yet. */
        feather_status st = st_header_len(k->head, 8, UINT64_MAX, k->path, &n, err);
        if (st) return st;
        k->want = 8 + (size_t)n;
        if (n) return FEATHER_OK;
    }
    st_header h;
    feather_status st = st_header_parse_prefix(&h, k->head, k->len, k->path, err);
    if (!st) k->limit = k->want + h.data_len;
    st_header_free(&h);
    return st;
}

/* Grows with what really arrived, so a lying N costs at most twice the real size. */
static feather_status keep_head(sink *k, const uint8_t **p, size_t *n, feather_error *err) {
    size_t take = k->want - k->len < *n ? k->want - k->len : *n;
    if (k->len + take > k->cap) {
        size_t cap = k->cap ? k->cap : 4096;
        while (cap < k->len + take) cap *= 2;
        if (cap > k->want && k->want > 8) cap = k->want;
        uint8_t *b = realloc(k->head, cap);
        if (!b) return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", k->path);
        k->head = b;
        k->cap = cap;
    }
    memcpy(k->head + k->len, *p, take);
    k->len += take;
    *p += take;
    *n -= take;
    return k->len == k->want ? check_head(k, err) : FEATHER_OK;
}

static feather_status consume(void *arg, const uint8_t *p, size_t n, feather_error *err) {
    sink *k = arg;
    if (k->fd >= 0 && k->total < k->limit) {
        uint64_t room = k->limit - k->total;
        feather_status st = write_all(k, p, room < n ? (size_t)room : n, err);
        if (st) return st;
    }
    k->total += n;
    while (n && k->len < k->want) {
        feather_status st = keep_head(k, &p, &n, err);
        if (st) return st;
    }
    return FEATHER_OK;
}

/* An anonymous file in dir: O_TMPFILE where the file system has it, else mkstemp + unlink. */
static int temp_fd(const char *dir) {
#ifdef O_TMPFILE
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
#endif
    char tmpl[4096];
    if ((size_t)snprintf(tmpl, sizeof tmpl, "%s/feather-XXXXXX", dir) >= sizeof tmpl) {
        errno = ENAMETOOLONG;
        return -1;
    }
    int fd2 = mkstemp(tmpl);
    if (fd2 < 0) return -1;
    unlink(tmpl);
    return fd2;
}

feather_status zst_decompress(const char *path, int *fd, uint8_t **head, size_t *head_len,
                              uint64_t *total, feather_error *err) {
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    sink k = {.path = path, .dir = dir, .fd = -1, .want = 8, .limit = UINT64_MAX};
    if (fd && (k.fd = temp_fd(dir)) < 0)
        return feather_fail(err, FEATHER_E_IO, "%s: cannot create a temporary file in %s: %s",
                            path, dir, strerror(errno));
    feather_status st = decompress(path, consume, &k, err);
    if (st) {
        if (k.fd >= 0) close(k.fd);
        free(k.head);
        return st;
    }
    if (fd) *fd = k.fd;
    *head = k.head;
    *head_len = k.len;
    *total = k.total;
    return FEATHER_OK;
}

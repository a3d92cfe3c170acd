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

/* ---- into a temporary file ---- */

typedef struct to_file {
    int fd;
    const char *path, *dir;
} to_file;

static feather_status write_all(void *arg, const uint8_t *p, size_t n, feather_error *err) {
    to_file *f = arg;
    while (n) {
        ssize_t w = write(f->fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return feather_fail(err, FEATHER_E_IO, "%s: writing the decompressed copy in %s: %s",
                                f->path, f->dir, w < 0 ? strerror(errno) : "no progress");
        p += w;
        n -= (size_t)w;
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

feather_status zst_to_tempfile(const char *path, int *fd, feather_error *err) {
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    to_file f = {temp_fd(dir), path, dir};
    if (f.fd < 0)
        return feather_fail(err, FEATHER_E_IO, "%s: cannot create a temporary file in %s: %s",
                            path, dir, strerror(errno));
    feather_status st = decompress(path, write_all, &f, err);
    if (st) {
        close(f.fd);
        return st;
    }
    *fd = f.fd;
    return FEATHER_OK;
}

/* ---- header only ---- */

typedef struct head {
    uint8_t *buf;
    size_t len, cap, want; /* want: 8 until N is known, then 8 + N */
    uint64_t total;
    const char *path;
} head;

static feather_status keep_head(void *arg, const uint8_t *p, size_t n, feather_error *err) {
    head *h = arg;
    h->total += n;
    while (n && h->len < h->want) {
        size_t take = h->want - h->len < n ? h->want - h->len : n;
        /* Grows with what really arrived, so a lying N costs at most twice the real size. */
        if (h->len + take > h->cap) {
            size_t cap = h->cap ? h->cap : 4096;
            while (cap < h->len + take) cap *= 2;
            if (cap > h->want) cap = h->want;
            uint8_t *b = realloc(h->buf, cap);
            if (!b) return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", h->path);
            h->buf = b;
            h->cap = cap;
        }
        memcpy(h->buf + h->len, p, take);
        h->len += take;
        p += take;
        n -= take;
        if (h->len == 8 && h->want == 8) {
            uint64_t v = feather_rd64le(h->buf);
            /* Past the limit the file is invalid whatever its size: the reader says so. */
            if (v <= FEATHER_MAX_HEADER) h->want = 8 + (size_t)v;
        }
    }
    return FEATHER_OK;
}

feather_status zst_read_head(const char *path, uint8_t **out, size_t *out_len, uint64_t *total,
                             feather_error *err) {
    head h = {.want = 8, .path = path};
    feather_status st = decompress(path, keep_head, &h, err);
    if (st) {
        free(h.buf);
        return st;
    }
    *out = h.buf;
    *out_len = h.len;
    *total = h.total;
    return FEATHER_OK;
}

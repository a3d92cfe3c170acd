/* Streaming safetensors writer.
 *
 * Tensors and metadata are declared first; feather_writer_begin lays the tensors out exactly
 * like the reference writer (dtype descending in enum order, then name, contiguous from 0),
 * writes the header, and from then on tensor bytes are appended in layout order as they are
 * produced, so a model never has to be in memory at once. Each tensor's XXH3-64 is computed
 * on the way through; the header holds fixed-width placeholders for them that commit patches
 * in place. The header never depends on data in any other way, so the same calls give the
 * same file, byte for byte.
 *
 * A ".zst" path gets the header as a frame of raw blocks (fixed size, patchable) followed by
 * the data as a normal compressed frame; the concatenation decompresses to the plain file.
 * Output goes through feather_outfile (crash safety, see outfile.c). */
#include "internal.h"
#include "json_write.h"
#include "outfile.h"
#include "zstd_frame.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zstd.h>

enum { W_DECLARING, W_WRITING, W_FAILED };

#define HASH_HEX 16
/* Tensor bytes are hashed and emitted in slices this large, so a slice is still in cache
 * when it is written or compressed right after being hashed. */
#define SLICE (4u << 20)

typedef struct wtensor {
    char *name;
    size_t name_len;
    feather_dtype dtype;
    unsigned ndim;
    uint64_t *shape;
    uint64_t nbytes, begin;
    uint64_t hash;
    size_t hash_pos; /* where its 16 hex digits sit in the header */
} wtensor;

typedef struct wmeta {
    char *key, *value; /* value NULL: the hash entry, generated at begin */
    size_t reserve;    /* > 0: a value of this many bytes filled in before commit */
    size_t pos;        /* where a reserved value sits in the header */
    int filled;
    struct wmeta *self; /* the declared entry, reached from the sorted copy */
} wmeta;

/* Set of strings, for duplicate checks in constant time per declaration. */
typedef struct strset {
    struct slot { uint64_t h; const char *s; } *slot;
    size_t cap, n;
} strset;

struct feather_writer {
    feather_outfile out;
    char *path;
    int zst, hashes;
    int state;
    feather_status fail_code;
    char fail_msg[FEATHER_ERROR_MAX];
    wtensor *t;
    size_t nt, tcap;
    wmeta *m;
    size_t nm, mcap;
    strset names, keys;
    char *header; /* 8 + N bytes, kept to patch the hashes at commit */
    size_t header_len;
    uint64_t total, written;
    size_t cur;       /* tensor receiving the next byte */
    uint64_t cur_off; /* bytes of it received so far */
    XXH3_state_t *xs;
    ZSTD_CCtx *cctx;
    unsigned char *zbuf;
    size_t zcap;
};

/* ---- string set ---- */

static int strset_grow(strset *s) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    struct slot *slot = calloc(cap, sizeof *slot);
    if (!slot) return -1;
    for (size_t i = 0; i < s->cap; i++) {
        if (!s->slot[i].s) continue;
        size_t j = (size_t)s->slot[i].h & (cap - 1);
        while (slot[j].s) j = (j + 1) & (cap - 1);
        slot[j] = s->slot[i];
    }
    free(s->slot);
    s->slot = slot;
    s->cap = cap;
    return 0;
}

/* 1 if present, 0 if added, -1 out of memory. s must stay alive while in the set. */
static int strset_add(strset *s, const char *str) {
    if ((s->n + 1) * 2 > s->cap && strset_grow(s)) return -1;
    size_t len = strlen(str);
    uint64_t h = XXH3_64bits(str, len);
    size_t j = (size_t)h & (s->cap - 1);
    for (; s->slot[j].s; j = (j + 1) & (s->cap - 1))
        if (s->slot[j].h == h && !strcmp(s->slot[j].s, str)) return 1;
    s->slot[j].h = h;
    s->slot[j].s = str;
    s->n++;
    return 0;
}

static int strset_has(const strset *s, const char *str) {
    if (!s->cap) return 0;
    uint64_t h = XXH3_64bits(str, strlen(str));
    for (size_t j = (size_t)h & (s->cap - 1); s->slot[j].s; j = (j + 1) & (s->cap - 1))
        if (s->slot[j].h == h && !strcmp(s->slot[j].s, str)) return 1;
    return 0;
}

/* ---- errors ---- */

/* After a failed write the output is unusable; every later call reports the first error. */
static feather_status poison(feather_writer *w, const feather_error *e, feather_status code) {
    w->state = W_FAILED;
    w->fail_code = code;
    memcpy(w->fail_msg, e->message, sizeof w->fail_msg);
    return code;
}

static feather_status failed_before(feather_writer *w, feather_error *err) {
    return feather_fail(err, w->fail_code, "%s", w->fail_msg);
}

/* ---- open / declare ---- */

feather_status feather_writer_open(feather_writer **out, const char *path,
                                   const feather_write_options *opts, feather_error *err) {
    if (!out) return feather_fail(err, FEATHER_E_ARG, "feather_writer_open: no result pointer");
    *out = NULL;
    static const feather_write_options defaults;
    if (!opts) opts = &defaults;
    if (!path || !*path) return feather_fail(err, FEATHER_E_ARG, "output path is empty");
    size_t plen = strlen(path);
    int zst = plen >= 4 && !strcmp(path + plen - 4, ".zst");
    if (zst && opts->zstd_level &&
        (opts->zstd_level < ZSTD_minCLevel() || opts->zstd_level > ZSTD_maxCLevel()))
        return feather_fail(err, FEATHER_E_ARG, "%s: zstd level %d is outside [%d, %d]", path,
                            opts->zstd_level, ZSTD_minCLevel(), ZSTD_maxCLevel());
    if (zst && opts->zstd_threads < 0)
        return feather_fail(err, FEATHER_E_ARG, "%s: zstd thread count %d is negative", path,
                            opts->zstd_threads);
    if (opts->ninputs && !opts->inputs)
        return feather_fail(err, FEATHER_E_ARG, "%s: %zu inputs given without a list", path,
                            opts->ninputs);

    feather_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->path = strdup(path))) {
        free(w);
        return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", path);
    }
    w->out.fd = w->out.dirfd = -1;
    w->zst = zst;
    w->hashes = !opts->no_hashes;
    feather_status st = FEATHER_OK;
    if (zst) {
        w->zcap = ZSTD_CStreamOutSize();
        w->cctx = ZSTD_createCCtx();
        w->zbuf = malloc(w->zcap);
        if (!w->cctx || !w->zbuf) {
            st = feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", path);
            goto fail;
        }
        size_t r = ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_compressionLevel,
                                          opts->zstd_level ? opts->zstd_level : 3);
        if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_checksumFlag, 1);
        if (!ZSTD_isError(r) && opts->zstd_threads)
            r = ZSTD_CCtx_setParameter(w->cctx, ZSTD_c_nbWorkers, opts->zstd_threads);
        if (ZSTD_isError(r)) {
            st = feather_fail(err, FEATHER_E_UNSUPPORTED, "%s: zstd: %s", path,
                              ZSTD_getErrorName(r));
            goto fail;
        }
    }
    if (w->hashes && !(w->xs = XXH3_createState())) {
        st = feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    st = feather_outfile_open(&w->out, path, opts->overwrite, opts->inputs, opts->ninputs, err);
    if (st) goto fail;
    *out = w;
    return FEATHER_OK;
fail:
    feather_writer_abort(w);
    return st;
}

static feather_status check_text(feather_writer *w, const char *what, const char *s,
                                 int nonempty, feather_error *err) {
    char q[128];
    if (!s) return feather_fail(err, FEATHER_E_ARG, "%s: %s is NULL", w->path, what);
    if (nonempty && !*s) return feather_fail(err, FEATHER_E_ARG, "%s: %s is empty", w->path, what);
    if (!feather_jw_utf8_ok(s, strlen(s)))
        return feather_fail(err, FEATHER_E_ARG, "%s: %s '%s' is not valid UTF-8", w->path, what,
                            feather_quote(s, q, sizeof q));
    return FEATHER_OK;
}

static feather_status not_declaring(feather_writer *w, const char *call, feather_error *err) {
    if (w->state == W_FAILED) return failed_before(w, err);
    return feather_fail(err, FEATHER_E_ARG, "%s: %s after feather_writer_begin", w->path, call);
}

static feather_status add_meta(feather_writer *w, const char *key, const char *value, size_t reserve,
                               feather_error *err) {
    char q[128];
    if (!w) return feather_fail(err, FEATHER_E_ARG, "feather_writer_metadata: no writer");
    if (w->state != W_DECLARING) return not_declaring(w, "metadata", err);
    feather_status st = check_text(w, "metadata key", key, 1, err);
    if (!st) st = check_text(w, "metadata value", value, 0, err);
    if (st) return st;
    if (!strcmp(key, FEATHER_HASH_KEY))
        return feather_fail(err, FEATHER_E_ARG,
                            "%s: metadata key '%s' is reserved for the writer's tensor hashes",
                            w->path, FEATHER_HASH_KEY);
    if (strset_has(&w->keys, key))
        return feather_fail(err, FEATHER_E_ARG, "%s: metadata key '%s' given twice", w->path,
                            feather_quote(key, q, sizeof q));
    if (w->nm == w->mcap) {
        size_t cap = w->mcap ? w->mcap * 2 : 16;
        wmeta *m = realloc(w->m, cap * sizeof *m);
        if (!m) return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", w->path);
        w->m = m;
        w->mcap = cap;
    }
    wmeta *e = &w->m[w->nm];
    memset(e, 0, sizeof *e);
    e->key = strdup(key);
    e->value = strdup(value);
    e->reserve = reserve;
    if (!e->key || !e->value || strset_add(&w->keys, e->key) < 0) {
        free(e->key);
        free(e->value);
        return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", w->path);
    }
    w->nm++;
    return FEATHER_OK;
}

feather_status feather_writer_metadata(feather_writer *w, const char *key, const char *value,
                                       feather_error *err) {
    return add_meta(w, key, value, 0, err);
}

feather_status feather_writer_metadata_reserve(feather_writer *w, const char *key, size_t len,
                                               feather_error *err) {
    char q[128];
    if (!len || len > 4096)
        return feather_fail(err, FEATHER_E_ARG, "%s: reserved metadata '%s' must be 1 to 4096 bytes",
                            w ? w->path : "?", feather_quote(key, q, sizeof q));
    char *zeros = malloc(len + 1);
    if (!zeros) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
    memset(zeros, '0', len);
    zeros[len] = 0;
    feather_status st = add_meta(w, key, zeros, len, err);
    free(zeros);
    return st;
}

feather_status feather_writer_metadata_fill(feather_writer *w, const char *key, const char *value,
                                            feather_error *err) {
    char q[128];
    if (!w) return feather_fail(err, FEATHER_E_ARG, "feather_writer_metadata_fill: no writer");
    if (w->state != W_WRITING)
        return feather_fail(err, FEATHER_E_ARG, "%s: metadata '%s' filled outside writing", w->path,
                            feather_quote(key, q, sizeof q));
    for (size_t i = 0; i < w->nm; i++) {
        wmeta *m = &w->m[i];
        if (strcmp(m->key, key)) continue;
        size_t len = strlen(value);
        if (!m->reserve || len != m->reserve)
            return feather_fail(err, FEATHER_E_ARG, "%s: metadata '%s' was not reserved with %zu bytes",
                                w->path, feather_quote(key, q, sizeof q), len);
        /* Written in place, so it must be its own JSON form: no escapes, valid UTF-8. */
        int plain = feather_jw_utf8_ok(value, len);
        for (size_t j = 0; j < len && plain; j++)
            if ((unsigned char)value[j] < 0x20 || value[j] == '"' || value[j] == '\\') plain = 0;
        if (!plain)
            return feather_fail(err, FEATHER_E_ARG,
                                "%s: reserved metadata '%s' must be valid UTF-8 needing no escaping",
                                w->path, feather_quote(key, q, sizeof q));
        memcpy(w->header + m->pos, value, len);
        m->filled = 1;
        return FEATHER_OK;
    }
    return feather_fail(err, FEATHER_E_ARG, "%s: metadata '%s' was not reserved", w->path,
                        feather_quote(key, q, sizeof q));
}

feather_status feather_writer_tensor(feather_writer *w, const char *name, feather_dtype dtype,
                                     unsigned ndim, const uint64_t *shape, feather_error *err) {
    char q[128];
    if (!w) return feather_fail(err, FEATHER_E_ARG, "feather_writer_tensor: no writer");
    if (w->state != W_DECLARING) return not_declaring(w, "tensor declared", err);
    feather_status st = check_text(w, "tensor name", name, 1, err);
    if (st) return st;
    feather_quote(name, q, sizeof q);
    if (!strcmp(name, "__metadata__"))
        return feather_fail(err, FEATHER_E_ARG,
                            "%s: tensor '%s': the name is reserved for the metadata", w->path, q);
    if ((unsigned)dtype >= FEATHER_DTYPE_COUNT)
        return feather_fail(err, FEATHER_E_ARG, "%s: tensor '%s': unknown dtype %d", w->path, q,
                            (int)dtype);
    if (ndim && !shape)
        return feather_fail(err, FEATHER_E_ARG, "%s: tensor '%s': %u dimensions but no shape",
                            w->path, q, ndim);
    /* Every dimension takes at least two header bytes, so more than this cannot fit. */
    if (ndim > FEATHER_MAX_HEADER / 2)
        return feather_fail(err, FEATHER_E_ARG, "%s: tensor '%s': %u dimensions do not fit a header",
                            w->path, q, ndim);
    /* Left to right with overflow checks, as the reader validates it. */
    uint64_t nelem = 1, bits;
    for (unsigned i = 0; i < ndim; i++)
        if (!feather_mul_ok(nelem, shape[i], &nelem))
            return feather_fail(err, FEATHER_E_ARG,
                                "%s: tensor '%s': element count overflows 64 bits", w->path, q);
    if (!feather_mul_ok(nelem, feather_dtype_bits(dtype), &bits))
        return feather_fail(err, FEATHER_E_ARG, "%s: tensor '%s': size in bits overflows 64 bits",
                            w->path, q);
    if (bits % 8)
        return feather_fail(err, FEATHER_E_ARG,
                            "%s: tensor '%s': %llu %s elements are not a whole number of bytes",
                            w->path, q, (unsigned long long)nelem, feather_dtype_name(dtype));
    if (strset_has(&w->names, name))
        return feather_fail(err, FEATHER_E_ARG, "%s: tensor '%s' declared twice", w->path, q);
    if (w->nt == w->tcap) {
        size_t cap = w->tcap ? w->tcap * 2 : 64;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", w->path);
        w->t = t;
        w->tcap = cap;
    }
    wtensor *t = &w->t[w->nt];
    memset(t, 0, sizeof *t);
    t->name_len = strlen(name);
    t->name = strdup(name);
    t->shape = malloc((ndim ? ndim : 1) * sizeof *t->shape);
    if (!t->name || !t->shape || strset_add(&w->names, t->name) < 0) {
        free(t->name);
        free(t->shape);
        return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", w->path);
    }
    if (ndim) memcpy(t->shape, shape, ndim * sizeof *shape);
    t->dtype = dtype;
    t->ndim = ndim;
    t->nbytes = bits / 8;
    w->nt++;
    return FEATHER_OK;
}

/* ---- layout and header ---- */

/* The reference order: dtype descending (enum order), then name ascending, bytewise. */
static int layout_cmp(const void *a, const void *b) {
    const wtensor *x = a, *y = b;
    if (x->dtype != y->dtype) return x->dtype > y->dtype ? -1 : 1;
    return strcmp(x->name, y->name);
}

static int meta_cmp(const void *a, const void *b) {
    return strcmp(((const wmeta *)a)->key, ((const wmeta *)b)->key);
}

/* The hash entry's value: a JSON object text {"name":"hex",…} in layout order, itself
 * escaped as a string of the header. Records where each tensor's digits land. */
static void put_hash_value(feather_writer *w, feather_jw *b) {
    feather_jw inner = {.limit = (size_t)-1};
    feather_jw_put(b, "{", 1);
    for (size_t i = 0; i < w->nt; i++) {
        wtensor *t = &w->t[i];
        inner.len = 0;
        if (i) feather_jw_put(&inner, ",", 1);
        feather_jw_put(&inner, "\"", 1);
        feather_jw_escaped(&inner, t->name, t->name_len);
        feather_jw_put(&inner, "\":\"", 3);
        if (inner.nomem) b->nomem = 1;
        feather_jw_escaped(b, inner.p, inner.len);
        t->hash_pos = b->len;
        feather_jw_put(b, "0000000000000000", HASH_HEX);
        feather_jw_put(b, "\\\"", 2);
    }
    feather_jw_put(b, "}", 1);
    free(inner.p);
}

static feather_status build_header(feather_writer *w, feather_error *err) {
    feather_jw b = {.limit = 8 + FEATHER_MAX_HEADER};
    feather_jw_put(&b, "\0\0\0\0\0\0\0\0", 8); /* N, filled in below */
    feather_jw_put(&b, "{", 1);
    size_t nm = w->nm + (w->hashes ? 1 : 0);
    if (nm) {
        wmeta *m = malloc(nm * sizeof *m);
        if (!m) return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", w->path);
        for (size_t i = 0; i < w->nm; i++) w->m[i].self = &w->m[i];
        if (w->nm) memcpy(m, w->m, w->nm * sizeof *m);
        if (w->hashes) m[w->nm] = (wmeta){.key = (char *)FEATHER_HASH_KEY};
        qsort(m, nm, sizeof *m, meta_cmp);
        feather_jw_puts(&b, "\"__metadata__\":{");
        for (size_t i = 0; i < nm; i++) {
            if (i) feather_jw_put(&b, ",", 1);
            feather_jw_put(&b, "\"", 1);
            feather_jw_escaped(&b, m[i].key, strlen(m[i].key));
            feather_jw_put(&b, "\":\"", 3);
            if (m[i].reserve) m[i].self->pos = b.len;
            if (m[i].value) feather_jw_escaped(&b, m[i].value, strlen(m[i].value));
            else put_hash_value(w, &b);
            feather_jw_put(&b, "\"", 1);
        }
        feather_jw_put(&b, "}", 1);
        free(m);
    }
    for (size_t i = 0; i < w->nt; i++) {
        const wtensor *t = &w->t[i];
        if (i || nm) feather_jw_put(&b, ",", 1);
        feather_jw_put(&b, "\"", 1);
        feather_jw_escaped(&b, t->name, t->name_len);
        feather_jw_puts(&b, "\":{\"dtype\":\"");
        feather_jw_puts(&b, feather_dtype_name(t->dtype));
        feather_jw_puts(&b, "\",\"shape\":[");
        for (unsigned d = 0; d < t->ndim; d++) {
            if (d) feather_jw_put(&b, ",", 1);
            feather_jw_u64(&b, t->shape[d]);
        }
        feather_jw_puts(&b, "],\"data_offsets\":[");
        feather_jw_u64(&b, t->begin);
        feather_jw_put(&b, ",", 1);
        feather_jw_u64(&b, t->begin + t->nbytes);
        feather_jw_puts(&b, "]}");
    }
    feather_jw_put(&b, "}", 1);
    /* Spaces up to a multiple of 8, so data starts 8-aligned (and, large dtypes first, every
     * tensor is aligned to its element size). */
    while (!b.over && !b.nomem && (b.len - 8) % 8) feather_jw_put(&b, " ", 1);
    if (b.nomem) {
        free(b.p);
        return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", w->path);
    }
    if (b.over) {
        free(b.p);
        return feather_fail(err, FEATHER_E_ARG,
                            "%s: header would be larger than %llu bytes (the format's limit)",
                            w->path, FEATHER_MAX_HEADER);
    }
    feather_wr64le((uint8_t *)b.p, b.len - 8);
    w->header = b.p;
    w->header_len = b.len;
    return FEATHER_OK;
}

static feather_status write_header(feather_writer *w, feather_error *err) {
    if (!w->zst) return feather_outfile_write(&w->out, w->header, w->header_len, err);
    uint8_t fh[FEATHER_ZSTD_FRAME_HEADER], bh[FEATHER_ZSTD_BLOCK_HEADER];
    feather_zstd_raw_frame_header(fh, w->header_len);
    feather_status st = feather_outfile_write(&w->out, fh, sizeof fh, err);
    for (size_t off = 0; !st && off < w->header_len; off += FEATHER_ZSTD_RAW_BLOCK) {
        size_t n = w->header_len - off;
        if (n > FEATHER_ZSTD_RAW_BLOCK) n = FEATHER_ZSTD_RAW_BLOCK;
        feather_zstd_raw_block_header(bh, n, off + n == w->header_len);
        st = feather_outfile_write(&w->out, bh, sizeof bh, err);
        if (!st) st = feather_outfile_write(&w->out, w->header + off, n, err);
    }
    return st;
}

/* Moves past tensors that are complete (zero-size ones included), finishing their hashes. */
static void advance(feather_writer *w) {
    while (w->cur < w->nt && w->cur_off == w->t[w->cur].nbytes) {
        if (w->hashes) {
            w->t[w->cur].hash = XXH3_64bits_digest(w->xs);
            XXH3_64bits_reset(w->xs);
        }
        w->cur++;
        w->cur_off = 0;
    }
}

void feather_writer_sort(feather_writer *w) {
    if (w && w->state == W_DECLARING && w->nt) qsort(w->t, w->nt, sizeof *w->t, layout_cmp);
}

static int has_reserved(const feather_writer *w) {
    for (size_t i = 0; i < w->nm; i++)
        if (w->m[i].reserve) return 1;
    return 0;
}

feather_status feather_writer_begin(feather_writer *w, feather_error *err) {
    if (!w) return feather_fail(err, FEATHER_E_ARG, "feather_writer_begin: no writer");
    if (w->state != W_DECLARING) return not_declaring(w, "feather_writer_begin", err);
    uint64_t off = 0;
    for (size_t i = 0; i < w->nt; i++) {
        w->t[i].begin = off;
        if (__builtin_add_overflow(off, w->t[i].nbytes, &off)) {
            char q[128];
            return feather_fail(err, FEATHER_E_ARG,
                                "%s: tensor '%s': data offsets overflow 64 bits", w->path,
                                feather_quote(w->t[i].name, q, sizeof q));
        }
    }
    w->total = off;
    feather_status st = build_header(w, err);
    if (st) return st;
    if (w->zst && w->total) {
        size_t r = ZSTD_CCtx_setPledgedSrcSize(w->cctx, w->total);
        if (ZSTD_isError(r))
            return feather_fail(err, FEATHER_E_IO, "%s: zstd: %s", w->path, ZSTD_getErrorName(r));
    }
    if (w->hashes) XXH3_64bits_reset(w->xs);
    w->state = W_WRITING;
    advance(w);
    feather_error local, *e = err ? err : &local;
    st = write_header(w, e);
    if (st) return poison(w, e, st);
    if (!w->hashes && !has_reserved(w)) {
        free(w->header);
        w->header = NULL;
    }
    return FEATHER_OK;
}

size_t feather_writer_count(const feather_writer *w) { return w ? w->nt : 0; }

const char *feather_writer_name_at(const feather_writer *w, size_t i) {
    return w && i < w->nt ? w->t[i].name : NULL;
}

uint64_t feather_writer_nbytes_at(const feather_writer *w, size_t i) {
    return w && i < w->nt ? w->t[i].nbytes : 0;
}

/* ---- data ---- */

static feather_status emit(feather_writer *w, const void *p, size_t n, feather_error *err) {
    if (!w->zst) return feather_outfile_write(&w->out, p, n, err);
    ZSTD_inBuffer in = {p, n, 0};
    while (in.pos < in.size) {
        ZSTD_outBuffer o = {w->zbuf, w->zcap, 0};
        size_t r = ZSTD_compressStream2(w->cctx, &o, &in, ZSTD_e_continue);
        if (ZSTD_isError(r))
            return feather_fail(err, FEATHER_E_IO, "%s: zstd: %s", w->path, ZSTD_getErrorName(r));
        feather_status st = feather_outfile_write(&w->out, w->zbuf, o.pos, err);
        if (st) return st;
    }
    return FEATHER_OK;
}

static feather_status zstd_finish(feather_writer *w, feather_error *err) {
    if (!w->total) return FEATHER_OK; /* no data, no data frame */
    ZSTD_inBuffer in = {NULL, 0, 0};
    size_t left;
    do {
        ZSTD_outBuffer o = {w->zbuf, w->zcap, 0};
        left = ZSTD_compressStream2(w->cctx, &o, &in, ZSTD_e_end);
        if (ZSTD_isError(left))
            return feather_fail(err, FEATHER_E_IO, "%s: zstd: %s", w->path,
                                ZSTD_getErrorName(left));
        feather_status st = feather_outfile_write(&w->out, w->zbuf, o.pos, err);
        if (st) return st;
    } while (left);
    return FEATHER_OK;
}

static void hash_bytes(feather_writer *w, const unsigned char *p, size_t n) {
    while (n) {
        uint64_t room = w->t[w->cur].nbytes - w->cur_off;
        size_t k = room < n ? (size_t)room : n;
        if (w->hashes) XXH3_64bits_update(w->xs, p, k);
        w->cur_off += k;
        p += k;
        n -= k;
        advance(w);
    }
}

feather_status feather_writer_write(feather_writer *w, const void *data, size_t len,
                                    feather_error *err) {
    if (!w) return feather_fail(err, FEATHER_E_ARG, "feather_writer_write: no writer");
    if (w->state == W_FAILED) return failed_before(w, err);
    if (w->state != W_WRITING)
        return feather_fail(err, FEATHER_E_ARG, "%s: data written before feather_writer_begin",
                            w->path);
    feather_error local, *e = err ? err : &local;
    if (feather_cancelled())
        return poison(w, e, feather_fail(e, FEATHER_E_CANCELLED, "%s: interrupted", w->path));
    if (len > w->total - w->written)
        return poison(w, e,
                      feather_fail(e, FEATHER_E_ARG,
                                   "%s: %zu bytes written past the end of the declared data "
                                   "(%llu bytes in all)",
                                   w->path, len - (size_t)(w->total - w->written),
                                   (unsigned long long)w->total));
    if (len && !data)
        return feather_fail(err, FEATHER_E_ARG, "%s: feather_writer_write: no data", w->path);
    const unsigned char *p = data;
    while (len) {
        size_t n = len < SLICE ? len : SLICE;
        hash_bytes(w, p, n);
        feather_status st = emit(w, p, n, e);
        if (st) return poison(w, e, st);
        w->written += n;
        p += n;
        len -= n;
    }
    return FEATHER_OK;
}

/* ---- commit / abort ---- */

/* Rewrites header bytes [lo, hi) in the output (through the raw blocks for ".zst"). */
static feather_status patch_range(feather_writer *w, size_t lo, size_t hi, feather_error *err) {
    feather_status st = feather_outfile_flush(&w->out, err);
    if (st || !w->zst) return st ? st : feather_outfile_pwrite(&w->out, w->header + lo, hi - lo, lo, err);
    while (lo < hi && !st) {
        size_t end = (lo / FEATHER_ZSTD_RAW_BLOCK + 1) * FEATHER_ZSTD_RAW_BLOCK;
        if (end > hi) end = hi;
        st = feather_outfile_pwrite(&w->out, w->header + lo, end - lo,
                                    feather_zstd_raw_frame_pos(lo), err);
        lo = end;
    }
    return st;
}

/* Writes the late parts of the header: every tensor's hash and the reserved metadata. */
static feather_status patch_header(feather_writer *w, feather_error *err) {
    static const char hex[] = "0123456789abcdef";
    feather_status st = FEATHER_OK;
    for (size_t i = 0; i < w->nm && !st; i++) {
        if (!w->m[i].reserve) continue;
        if (!w->m[i].filled) {
            char q[128];
            return feather_fail(err, FEATHER_E_ARG, "%s: reserved metadata '%s' was never filled",
                                w->path, feather_quote(w->m[i].key, q, sizeof q));
        }
        st = patch_range(w, w->m[i].pos, w->m[i].pos + w->m[i].reserve, err);
    }
    if (st || !w->hashes || !w->nt) return st;
    for (size_t i = 0; i < w->nt; i++)
        for (int k = 0; k < HASH_HEX; k++)
            w->header[w->t[i].hash_pos + (size_t)k] = hex[(w->t[i].hash >> (60 - 4 * k)) & 15];
    /* Positions grow in layout order: one contiguous range holds every digit. */
    return patch_range(w, w->t[0].hash_pos, w->t[w->nt - 1].hash_pos + HASH_HEX, err);
}

feather_status feather_writer_commit(feather_writer *w, feather_error *err) {
    if (!w) return feather_fail(err, FEATHER_E_ARG, "feather_writer_commit: no writer");
    feather_status st;
    if (w->state == W_FAILED) {
        st = failed_before(w, err);
    } else if (w->state != W_WRITING) {
        st = feather_fail(err, FEATHER_E_ARG, "%s: commit before feather_writer_begin", w->path);
    } else if (w->written != w->total) {
        char q[128];
        st = feather_fail(err, FEATHER_E_ARG,
                          "%s: tensor '%s': incomplete, %llu of %llu data bytes written",
                          w->path, feather_quote(w->t[w->cur].name, q, sizeof q),
                          (unsigned long long)w->written, (unsigned long long)w->total);
    } else {
        st = w->zst ? zstd_finish(w, err) : FEATHER_OK;
        if (!st) st = patch_header(w, err);
        if (!st) st = feather_outfile_commit(&w->out, err);
    }
    feather_writer_abort(w);
    return st;
}

void feather_writer_abort(feather_writer *w) {
    if (!w) return;
    feather_outfile_discard(&w->out);
    for (size_t i = 0; i < w->nt; i++) {
        free(w->t[i].name);
        free(w->t[i].shape);
    }
    for (size_t i = 0; i < w->nm; i++) {
        free(w->m[i].key);
        free(w->m[i].value);
    }
    free(w->t);
    free(w->m);
    free(w->names.slot);
    free(w->keys.slot);
    free(w->header);
    if (w->xs) XXH3_freeState(w->xs);
    ZSTD_freeCCtx(w->cctx);
    free(w->zbuf);
    free(w->path);
    free(w);
}

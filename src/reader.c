/*
 * The reader object: one or more shards, each a validated header plus a read-only mapping of its
 * file. Tensor data is handed out as pointers into the mapping (zero-copy); a tensor's recorded
 * XXH3 is checked the first time it is handed out.
 */
#include "reader_internal.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct shard {
    char *path;
    st_header hdr;
    const uint8_t *map; /* the whole file; NULL when opened header-only */
    uint8_t *head;      /* header-only: a copy of the first 8 + N bytes */
    size_t map_len;     /* bytes to unmap; 0 when the memory is not ours */
    uint64_t file_size;
    size_t first;       /* index of its first tensor in the reader */
    uintptr_t rel_lo, rel_hi; /* released pages not yet given back (feather_tensor_release) */
} shard;

struct feather_reader {
    char *path;
    unsigned flags;
    unsigned nshards;
    shard *shards;
    size_t ntensors;
    feather_tensor *tensors;         /* by (shard, begin) */
    const feather_tensor **by_name;  /* sorted by name */
    _Atomic unsigned char *verified; /* per tensor: its recorded hash matched */
    cJSON **quant_meta;              /* per shard: _quantization_metadata parsed, once asked for */
    feather_json_index *quant_layers; /* per shard: its "layers" by name */
    pthread_mutex_t rel_mu;          /* the shards' rel_lo, rel_hi */
};

static feather_status pread_full(int fd, void *buf, size_t len, uint64_t off, const char *name,
                                 feather_error *err) {
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, (uint8_t *)buf + got, len - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return feather_fail(err, FEATHER_E_IO, "%s: read failed: %s", name, strerror(errno));
        if (r == 0)
            return feather_fail(err, FEATHER_E_IO, "%s: file shrank while being read", name);
        got += (size_t)r;
    }
    return FEATHER_OK;
}

/* Header-only: reads the 8 length bytes, then exactly the header, never the data. */
static feather_status read_head(shard *s, int fd, const char *name, feather_error *err) {
    uint8_t len8[8];
    size_t n8 = s->file_size < 8 ? (size_t)s->file_size : 8;
    uint64_t n;
    feather_status st = pread_full(fd, len8, n8, 0, name, err);
    if (st || (st = st_header_len(len8, n8, s->file_size, name, &n, err))) return st;
    /* n is within both the limit and the file, so this allocation is bounded by real bytes. */
    uint8_t *buf = malloc(8 + (size_t)n);
    if (!buf) return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory for the header", name);
    st = pread_full(fd, buf, 8 + (size_t)n, 0, name, err);
    if (!st) st = st_header_parse(&s->hdr, buf, 8 + (size_t)n, s->file_size, name, err);
    s->head = buf; /* kept for feather_shard_header_bytes */
    return st;
}

/* Maps the whole file read-only. */
static feather_status map_fd(shard *s, int fd, const char *name, feather_error *err) {
    if (s->file_size > SIZE_MAX)
        return feather_fail(err, FEATHER_E_UNSUPPORTED, "%s: too large to map", name);
    void *m = mmap(NULL, (size_t)s->file_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        return feather_fail(err, FEATHER_E_IO, "%s: mmap failed: %s", name, strerror(errno));
    s->map = m;
    s->map_len = (size_t)s->file_size;
    return FEATHER_OK;
}

static feather_status open_fd(shard *s, int fd, const char *name, unsigned flags,
                              feather_error *err) {
    struct stat sb;
    if (fstat(fd, &sb)) return feather_fail(err, FEATHER_E_IO, "%s: %s", name, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return feather_fail(err, FEATHER_E_INVALID, "%s: not a regular file", name);
    s->file_size = (uint64_t)sb.st_size;
    if ((flags & FEATHER_OPEN_HEADER_ONLY) || s->file_size < 8) return read_head(s, fd, name, err);
    /* Validated through the mapping itself: no copy of the header. Pages of the file that
     * another process truncates later would fault (SIGBUS) like any mmap reader's. */
    feather_status st = map_fd(s, fd, name, err);
    return st ? st : st_header_parse(&s->hdr, s->map, s->map_len, s->file_size, name, err);
}

/* The header is validated from the decompressed head with the real decompressed size; only then
 * is the temporary copy (which then holds exactly the declared bytes) mapped. */
static feather_status open_zst(shard *s, const char *path, unsigned flags, feather_error *err) {
    int fd = -1;
    size_t len;
    feather_status st = zst_decompress(path, (flags & FEATHER_OPEN_HEADER_ONLY) ? NULL : &fd,
                                       &s->head, &len, &s->file_size, err);
    if (st) return st;
    st = st_header_parse(&s->hdr, s->head, len, s->file_size, path, err);
    if (!st && fd >= 0) {
        st = map_fd(s, fd, path, err);
        free(s->head); /* the mapping holds the header now */
        s->head = NULL;
    }
    if (fd >= 0) close(fd); /* the mapping keeps the unlinked file alive */
    return st;
}

static feather_status open_shard(shard *s, const char *path, unsigned flags, feather_error *err) {
    if (!(s->path = strdup(path))) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
    if (feather_ends_with(path, ".zst")) return open_zst(s, path, flags, err);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return feather_fail(err, FEATHER_E_IO, "%s: %s", path, strerror(errno));
    feather_status st = open_fd(s, fd, path, flags, err);
    close(fd);
    return st;
}

static feather_reader *reader_new(const char *path, unsigned flags, unsigned nshards) {
    feather_reader *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->rel_mu, NULL);
    r->flags = flags;
    r->nshards = nshards;
    r->path = strdup(path);
    r->shards = calloc(nshards, sizeof *r->shards);
    if (!r->path || !r->shards) {
        feather_close(r);
        return NULL;
    }
    return r;
}

void feather_close(feather_reader *r) {
    if (!r) return;
    for (unsigned i = 0; r->shards && i < r->nshards; i++) {
        shard *s = &r->shards[i];
        if (s->map_len) munmap((void *)s->map, s->map_len);
        st_header_free(&s->hdr);
        free(s->head);
        free(s->path);
    }
    for (unsigned i = 0; r->quant_meta && i < r->nshards; i++) {
        cJSON_Delete(r->quant_meta[i]);
        feather_json_index_free(&r->quant_layers[i]);
    }
    free(r->quant_meta);
    free(r->quant_layers);
    free(r->shards);
    free(r->tensors);
    free(r->by_name);
    free((void *)r->verified);
    free(r->path);
    pthread_mutex_destroy(&r->rel_mu);
    free(r);
}

static int cmp_by_name(const void *a, const void *b) {
    return strcmp((*(const feather_tensor *const *)a)->name, (*(const feather_tensor *const *)b)->name);
}

/* Gathers the shards' tensors into one list and a name index; a name in two shards is an error. */
static feather_status assemble(feather_reader *r, feather_error *err) {
    size_t n = 0;
    for (unsigned i = 0; i < r->nshards; i++) n += r->shards[i].hdr.ntensors;
    r->tensors = malloc((n ? n : 1) * sizeof *r->tensors);
    r->by_name = malloc((n ? n : 1) * sizeof *r->by_name);
    r->verified = calloc(n ? n : 1, sizeof *r->verified);
    if (!r->tensors || !r->by_name || !r->verified)
        return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", r->path);
    for (unsigned i = 0; i < r->nshards; i++) {
        shard *s = &r->shards[i];
        s->first = r->ntensors;
        for (size_t k = 0; k < s->hdr.ntensors; k++) {
            feather_tensor *t = &r->tensors[r->ntensors++];
            *t = s->hdr.tensors[k];
            t->shard = i;
        }
    }
    for (size_t i = 0; i < n; i++) r->by_name[i] = &r->tensors[i];
    qsort(r->by_name, n, sizeof *r->by_name, cmp_by_name);
    for (size_t i = 1; i < n; i++) {
        const feather_tensor *a = r->by_name[i - 1], *b = r->by_name[i];
        if (!strcmp(a->name, b->name)) {
            char q[256];
            return feather_fail(err, FEATHER_E_INVALID, "%s: tensor '%s' is in two shards: %s and %s",
                                r->path, feather_quote(a->name, q, sizeof q),
                                r->shards[a->shard].path, r->shards[b->shard].path);
        }
    }
    return FEATHER_OK;
}

/* The weight map and the shards must agree both ways. */
static feather_status check_index(const feather_reader *r, const st_index *ix,
                                  feather_error *err) {
    char q[256];
    for (size_t i = 0; i < ix->nentries; i++) {
        const st_index_entry *e = &ix->entries[i];
        const feather_tensor *t = feather_find(r, e->tensor);
        if (!t)
            return feather_fail(err, FEATHER_E_INVALID,
                                "%s: weight_map puts tensor '%s' in %s, which has no such tensor",
                                r->path, feather_quote(e->tensor, q, sizeof q),
                                ix->shard_paths[e->shard]);
        if (t->shard != e->shard)
            return feather_fail(err, FEATHER_E_INVALID,
                                "%s: weight_map puts tensor '%s' in %s, but it is in %s", r->path,
                                feather_quote(e->tensor, q, sizeof q), ix->shard_paths[e->shard],
                                r->shards[t->shard].path);
    }
    for (size_t i = 0; i < r->ntensors; i++) {
        const feather_tensor *t = &r->tensors[i];
        if (!st_index_find(ix, t->name))
            return feather_fail(err, FEATHER_E_INVALID,
                                "%s: tensor '%s' of %s is not listed in weight_map", r->path,
                                feather_quote(t->name, q, sizeof q), r->shards[t->shard].path);
    }
    return FEATHER_OK;
}

static feather_status open_index(feather_reader **out, const char *path, const char *index,
                                 unsigned flags, feather_error *err) {
    st_index ix;
    feather_status st = st_index_load(&ix, index, err);
    feather_reader *r = NULL;
    if (st) goto out;
    if (!(r = reader_new(index, flags, ix.nshards))) {
        st = feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", path);
        goto out;
    }
    for (unsigned i = 0; i < ix.nshards && !st; i++)
        if ((st = open_shard(&r->shards[i], ix.shard_paths[i], flags, err)))
            feather_fail_prefix(err, st, "%s", index); /* the index that named the shard */
    if (!st) st = assemble(r, err);
    if (!st) st = check_index(r, &ix, err);
    /* feather_reader_path returns what the caller gave (the directory, when it was one). */
    if (!st && strcmp(r->path, path)) {
        char *p = strdup(path);
        if (!p) st = feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", path);
        else {
            free(r->path);
            r->path = p;
        }
    }
out:
    st_index_free(&ix);
    if (st) feather_close(r);
    else *out = r;
    return st;
}

static feather_status open_single(feather_reader **out, const char *path, const char *file,
                                  unsigned flags, feather_error *err) {
    feather_reader *r = reader_new(path, flags, 1);
    if (!r) return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", path);
    feather_status st = open_shard(&r->shards[0], file, flags, err);
    if (!st) st = assemble(r, err);
    if (st) feather_close(r);
    else *out = r;
    return st;
}

feather_status feather_open(feather_reader **out, const char *path, unsigned flags,
                            feather_error *err) {
    if (!out || !path) return feather_fail(err, FEATHER_E_ARG, "feather_open: no path");
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb)) return feather_fail(err, FEATHER_E_IO, "%s: %s", path, strerror(errno));
    char *model = NULL;
    if (S_ISDIR(sb.st_mode)) {
        feather_status st = st_dir_model(path, &model, err);
        if (st) return st;
    }
    const char *file = model ? model : path;
    feather_status st = st_is_index_path(file) ? open_index(out, path, file, flags, err)
                                               : open_single(out, path, file, flags, err);
    free(model);
    return st;
}

feather_status st_open_memory(feather_reader **out, const void *buf, size_t len, const char *name,
                              unsigned flags, feather_error *err) {
    *out = NULL;
    feather_reader *r = reader_new(name, flags & ~(unsigned)FEATHER_OPEN_HEADER_ONLY, 1);
    if (!r) return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", name);
    shard *s = &r->shards[0];
    s->map = buf;
    s->file_size = len;
    feather_status st = (s->path = strdup(name)) ? FEATHER_OK
                                                 : feather_fail(err, FEATHER_E_NOMEM, "out of memory");
    if (!st) st = st_header_parse(&s->hdr, buf, len, len, name, err);
    if (!st) st = assemble(r, err);
    if (st) feather_close(r);
    else *out = r;
    return st;
}

const char *feather_reader_path(const feather_reader *r) { return r ? r->path : NULL; }
size_t feather_count(const feather_reader *r) { return r ? r->ntensors : 0; }

const feather_tensor *feather_tensor_at(const feather_reader *r, size_t i) {
    return r && i < r->ntensors ? &r->tensors[i] : NULL;
}

const feather_tensor *feather_find(const feather_reader *r, const char *name) {
    if (!r || !name) return NULL;
    size_t lo = 0, hi = r->ntensors;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(r->by_name[mid]->name, name);
        if (c == 0) return r->by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

size_t feather_tensor_index(const feather_reader *r, const feather_tensor *t) {
    uintptr_t p = (uintptr_t)t, base = (uintptr_t)r->tensors;
    if (p < base || (p - base) % sizeof *t || (p - base) / sizeof *t >= r->ntensors)
        return (size_t)-1;
    return (p - base) / sizeof *t;
}

feather_status feather_tensor_data(feather_reader *r, const feather_tensor *t, const void **data,
                                   feather_error *err) {
    size_t i = r && t ? feather_tensor_index(r, t) : (size_t)-1;
    if (i == (size_t)-1 || !data)
        return feather_fail(err, FEATHER_E_ARG, "feather_tensor_data: not a tensor of this reader");
    const shard *s = &r->shards[t->shard];
    if (!s->map)
        return feather_fail(err, FEATHER_E_ARG, "%s: opened header-only: tensor data is not mapped",
                            s->path);
    const uint8_t *p = s->map + 8 + s->hdr.header_len + t->begin;
    if (s->hdr.hashes && !(r->flags & FEATHER_OPEN_NO_HASH_CHECK) &&
        !atomic_load_explicit(&r->verified[i], memory_order_acquire)) {
        uint64_t want = s->hdr.hashes[i - s->first], got = feather_hash(p, t->nbytes);
        if (got != want) {
            char q[256];
            return feather_fail(err, FEATHER_E_MISMATCH,
                                "%s: tensor '%s': XXH3 mismatch (recorded %016llx, computed %016llx)",
                                s->path, feather_quote(t->name, q, sizeof q),
                                (unsigned long long)want, (unsigned long long)got);
        }
        /* Two threads may both hash the tensor the first time; both find the same answer. */
        atomic_store_explicit(&r->verified[i], 1, memory_order_release);
    }
    *data = p;
    return FEATHER_OK;
}

/* The pages holding t in its shard's mapping, [*lo, *hi) (rounded outwards: a neighbour's page
 * dropped from the mapping is read again from the file when touched, so advice stays advisory);
 * 0 when there are none of ours. */
static int tensor_pages(feather_reader *r, const feather_tensor *t, shard **sp, uintptr_t *lo, uintptr_t *hi) {
    size_t i = r && t ? feather_tensor_index(r, t) : (size_t)-1;
    if (i == (size_t)-1 || !t->nbytes) return 0;
    shard *s = &r->shards[t->shard];
    if (!s->map_len) return 0; /* header-only, or memory that is not ours */
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t page = ps > 0 ? (uintptr_t)ps : 4096;
    *lo = (uintptr_t)(s->map + 8 + s->hdr.header_len + t->begin) & ~(page - 1);
    *hi = ((uintptr_t)(s->map + 8 + s->hdr.header_len + t->begin + t->nbytes) + page - 1) & ~(page - 1);
    *sp = s;
    return 1;
}

void feather_tensor_prefetch(feather_reader *r, const feather_tensor *t) {
    shard *s;
    uintptr_t lo, hi;
    if (tensor_pages(r, t, &s, &lo, &hi)) (void)madvise((void *)lo, hi - lo, MADV_WILLNEED);
}

/* Released pages go back to the system in runs of RELEASE_BATCH: a madvise per small tensor
 * made the kernel split the mapping's huge pages and flush every thread's TLB once per tensor
 * (93 696 tensors of 388 bytes: 6.7 s of system time in an 8.8 s up-to-date rerun). A shard
 * gathers the pages released since its last madvise while they touch one another, and gives
 * them back when the run reaches RELEASE_BATCH or a release falls outside it; at most that much
 * more of each shard stays mapped. */
#define RELEASE_BATCH ((uintptr_t)8 << 20)

/* Gives the shard's gathered run back and starts an empty one (under rel_mu). */
static void give_back(shard *s) {
    if (s->rel_hi > s->rel_lo) (void)madvise((void *)s->rel_lo, s->rel_hi - s->rel_lo, MADV_DONTNEED);
    s->rel_lo = s->rel_hi = 0;
}

void feather_tensor_release(feather_reader *r, const feather_tensor *t) {
    shard *s;
    uintptr_t lo, hi;
    if (!tensor_pages(r, t, &s, &lo, &hi)) return;
    pthread_mutex_lock(&r->rel_mu);
    if (s->rel_hi > s->rel_lo && (hi < s->rel_lo || lo > s->rel_hi)) give_back(s);
    if (s->rel_hi == s->rel_lo) {
        s->rel_lo = lo;
        s->rel_hi = hi;
    } else {
        if (lo < s->rel_lo) s->rel_lo = lo;
        if (hi > s->rel_hi) s->rel_hi = hi;
    }
    if (s->rel_hi - s->rel_lo >= RELEASE_BATCH) give_back(s);
    pthread_mutex_unlock(&r->rel_mu);
}

int feather_recorded_hash(const feather_reader *r, const feather_tensor *t, uint64_t *hash) {
    size_t i = r && t ? feather_tensor_index(r, t) : (size_t)-1;
    if (i == (size_t)-1) return 0;
    const shard *s = &r->shards[t->shard];
    if (!s->hdr.hashes) return 0;
    if (hash) *hash = s->hdr.hashes[i - s->first];
    return 1;
}

unsigned feather_shard_count(const feather_reader *r) { return r ? r->nshards : 0; }

static const shard *get_shard(const feather_reader *r, unsigned i) {
    return r && i < r->nshards ? &r->shards[i] : NULL;
}

const char *feather_shard_path(const feather_reader *r, unsigned i) {
    const shard *s = get_shard(r, i);
    return s ? s->path : NULL;
}

uint64_t feather_shard_header_len(const feather_reader *r, unsigned i) {
    const shard *s = get_shard(r, i);
    return s ? s->hdr.header_len : 0;
}

uint64_t feather_shard_file_size(const feather_reader *r, unsigned i) {
    const shard *s = get_shard(r, i);
    return s ? s->file_size : 0;
}

const uint8_t *feather_shard_header_bytes(const feather_reader *r, unsigned i) {
    const shard *s = get_shard(r, i);
    return s ? (s->map ? s->map : s->head) : NULL;
}

size_t feather_metadata_count(const feather_reader *r, unsigned i) {
    const shard *s = get_shard(r, i);
    return s ? s->hdr.nmeta : 0;
}

const char *feather_metadata_key(const feather_reader *r, unsigned i, size_t k) {
    const shard *s = get_shard(r, i);
    return s && k < s->hdr.nmeta ? s->hdr.meta_key[k] : NULL;
}

const char *feather_metadata_value(const feather_reader *r, unsigned i, size_t k) {
    const shard *s = get_shard(r, i);
    return s && k < s->hdr.nmeta ? s->hdr.meta_value[k] : NULL;
}

const char *feather_metadata_get(const feather_reader *r, unsigned i, const char *key) {
    const shard *s = get_shard(r, i);
    for (size_t k = 0; s && key && k < s->hdr.nmeta; k++)
        if (!strcmp(s->hdr.meta_key[k], key)) return s->hdr.meta_value[k];
    return NULL;
}

const cJSON *feather_quant_layer(feather_reader *r, unsigned shard, const char *layer) {
    if (shard >= r->nshards) return NULL;
    if (!r->quant_meta) {
        r->quant_layers = calloc(r->nshards, sizeof *r->quant_layers);
        if (!r->quant_layers || !(r->quant_meta = calloc(r->nshards, sizeof *r->quant_meta))) {
            free(r->quant_layers);
            r->quant_layers = NULL;
            return NULL;
        }
        for (unsigned i = 0; i < r->nshards; i++) {
            const char *v = feather_metadata_get(r, i, "_quantization_metadata");
            r->quant_meta[i] = v ? cJSON_Parse(v) : NULL;
            /* out of memory: an empty index, as if the layers were not there */
            (void)feather_json_index_init(&r->quant_layers[i], cJSON_GetObjectItemCaseSensitive(r->quant_meta[i], "layers"));
        }
    }
    return feather_json_index_get(&r->quant_layers[shard], layer);
}

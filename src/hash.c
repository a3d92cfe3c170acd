/* The content hash recorded by the writer and checked by the reader: XXH3-64, seed 0,
 * computed with the widest vectors the CPU has (hash_simd.h; FEATHER_SIMD lowers the choice). */
#include "internal.h"
#include "hash_simd.h"

#include <pthread.h>
#include <stdlib.h>
#include <xxhash.h>

static uint64_t lib_hash(const void *data, size_t len) { return XXH3_64bits(data, len); }
static void *lib_new(void) {
    XXH3_state_t *s = XXH3_createState();
    if (s) XXH3_64bits_reset(s);
    return s;
}
static void lib_update(void *s, const void *data, size_t len) { XXH3_64bits_update(s, data, len); }
static uint64_t lib_digest(void *s) { return XXH3_64bits_digest(s); }
static void lib_free(void *s) { XXH3_freeState(s); }

static feather_xxh3_impl xxh3 = {lib_hash, lib_new, lib_update, lib_digest, lib_free};
static pthread_once_t xxh3_once = PTHREAD_ONCE_INIT;

static void xxh3_pick(void) {
    switch (feather_simd_detect()) {
    case FEATHER_SIMD_AVX512: feather_xxh3_avx512(&xxh3); break;
    case FEATHER_SIMD_AVX2: feather_xxh3_avx2(&xxh3); break;
    default: break;
    }
}

static const feather_xxh3_impl *impl(void) {
    pthread_once(&xxh3_once, xxh3_pick);
    return &xxh3;
}

uint64_t feather_hash(const void *data, size_t len) { return impl()->hash(data, len); }

/* The shard's next tensor after index i (feather_count when none). */
static size_t next_of_shard(feather_reader *r, unsigned shard, size_t i) {
    while (i < feather_count(r) && feather_tensor_at(r, i)->shard != shard) i++;
    return i;
}

feather_status feather_shard_hasher_begin(feather_shard_hasher *s, feather_reader *r, unsigned shard,
                                          feather_error *err) {
    s->state = impl()->stream_new();
    s->shard = shard;
    s->next = next_of_shard(r, shard, 0);
    if (!s->state) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
    impl()->stream_update(s->state, feather_shard_header_bytes(r, shard), 8 + feather_shard_header_len(r, shard));
    return FEATHER_OK;
}

int feather_shard_hasher_wants(const feather_shard_hasher *s, feather_reader *r, const feather_tensor *t) {
    return s->state && s->next < feather_count(r) && feather_tensor_at(r, s->next) == t;
}

void feather_shard_hasher_feed(feather_shard_hasher *s, feather_reader *r, const void *data, size_t len) {
    impl()->stream_update(s->state, data, len);
    s->next = next_of_shard(r, s->shard, s->next + 1);
}

feather_status feather_shard_hasher_finish(feather_shard_hasher *s, feather_reader *r, uint64_t *out,
                                           feather_error *err) {
    feather_status st = FEATHER_OK;
    while (s->next < feather_count(r) && !st) {
        const feather_tensor *t = feather_tensor_at(r, s->next);
        const void *d;
        if (feather_cancelled()) st = feather_fail(err, FEATHER_E_CANCELLED, "interrupted");
        else if (!(st = feather_tensor_data(r, t, &d, err))) feather_shard_hasher_feed(s, r, d, t->nbytes);
        feather_tensor_release(r, t);
    }
    if (!st) *out = impl()->stream_digest(s->state);
    feather_shard_hasher_free(s);
    return st;
}

void feather_shard_hasher_free(feather_shard_hasher *s) {
    if (s->state) impl()->stream_free(s->state);
    s->state = NULL;
}

feather_status feather_shard_xxh3(feather_reader *r, unsigned shard, uint64_t *out, feather_error *err) {
    feather_shard_hasher s;
    feather_status st = feather_shard_hasher_begin(&s, r, shard, err);
    if (st) {
        feather_shard_hasher_free(&s);
        return st;
    }
    return feather_shard_hasher_finish(&s, r, out, err);
}

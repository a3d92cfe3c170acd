/* The content hash recorded by the writer and checked by the reader: XXH3-64, seed 0. */
#include "internal.h"

#include <xxhash.h>

uint64_t feather_hash(const void *data, size_t len) { return XXH3_64bits(data, len); }

feather_status feather_shard_xxh3(feather_reader *r, unsigned shard, uint64_t *out, feather_error *err) {
    XXH3_state_t *h = XXH3_createState();
    if (!h) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
    XXH3_64bits_reset(h);
    XXH3_64bits_update(h, feather_shard_header_bytes(r, shard), 8 + feather_shard_header_len(r, shard));
    feather_status st = FEATHER_OK;
    for (size_t i = 0; i < feather_count(r) && !st; i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        if (t->shard != shard) continue;
        const void *d;
        if (feather_cancelled()) st = feather_fail(err, FEATHER_E_CANCELLED, "interrupted");
        else if (!(st = feather_tensor_data(r, t, &d, err))) XXH3_64bits_update(h, d, t->nbytes);
        feather_tensor_release(r, t);
    }
    *out = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    return st;
}

/*
 * libFuzzer target for the header validation: every input is taken as a whole safetensors file
 * held in memory. It must never crash, hang or allocate by a lying field, and the JSON pre-scan
 * and cJSON must never disagree (messages ending in JSON_DISAGREE: abort, so the fuzzer keeps
 * the input).
 *
 *   make fuzz FUZZ_SECONDS=60
 */
#include "reader_internal.h"

#include <stdlib.h>
#include <string.h>

static void oracle(const feather_error *err) {
    size_t n = strlen(err->message), m = strlen(JSON_DISAGREE);
    if (n >= m && !strcmp(err->message + n - m, JSON_DISAGREE)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    feather_error err = {0};
    if (feather_check_header(data, size, size, "fuzz", &err)) oracle(&err);

    feather_reader *r = NULL;
    if (st_open_memory(&r, data, size, "fuzz", 0, &err)) {
        oracle(&err);
        return 0;
    }
    /* Touch every tensor (the recorded hashes are checked on this first access) and every
     * lookup path. */
    for (size_t i = 0; i < feather_count(r); i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        const void *p;
        if (feather_find(r, t->name) != t) abort();
        if (feather_tensor_data(r, t, &p, &err) == FEATHER_OK && t->nbytes) {
            volatile uint8_t last = ((const uint8_t *)p)[t->nbytes - 1];
            (void)last;
        }
        uint64_t h;
        feather_recorded_hash(r, t, &h);
    }
    for (size_t i = 0; i < feather_metadata_count(r, 0); i++)
        if (feather_metadata_get(r, 0, feather_metadata_key(r, 0, i)) == NULL) abort();
    feather_close(r);
    return 0;
}

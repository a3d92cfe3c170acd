/*
 * The hashes a feather-written file records under FEATHER_HASH_KEY: a JSON object string
 * {"tensor name": "16 lowercase hex digits of XXH3-64", ...} listing every tensor of the file and
 * nothing else. A malformed record makes the whole file invalid: a half-trusted hash is worse
 * than none.
 */
#include "reader_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct named {
    const char *name;
    size_t idx;
} named;

static int cmp_named(const void *a, const void *b) {
    return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

static int parse_hex16(const char *s, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char c = s[i];
        if (c >= '0' && c <= '9') v = v << 4 | (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v = v << 4 | (uint64_t)(c - 'a' + 10);
        else return -1;
    }
    if (s[16]) return -1;
    *out = v;
    return 0;
}

static const char *find_record(const st_header *h) {
    for (size_t i = 0; i < h->nmeta; i++)
        if (!strcmp(h->meta_key[i], FEATHER_HASH_KEY)) return h->meta_value[i];
    return NULL;
}

/* Fills h->hashes from the parsed record; 'seen' marks tensors already given a hash. */
static feather_status fill(st_header *h, const cJSON *root, const named *sorted,
                           unsigned char *seen, const char *name, feather_error *err) {
    char q[256];
    for (const cJSON *c = root->child; c; c = c->next) {
        uint64_t v;
        if (!cJSON_IsString(c) || parse_hex16(c->valuestring, &v))
            return feather_fail(err, FEATHER_E_INVALID,
                                "%s: metadata '%s': the hash of '%s' is not 16 lowercase hex digits",
                                name, FEATHER_HASH_KEY, feather_quote(c->string, q, sizeof q));
        named key = {c->string, 0};
        const named *n = bsearch(&key, sorted, h->ntensors, sizeof *sorted, cmp_named);
        if (!n)
            return feather_fail(err, FEATHER_E_INVALID,
                                "%s: metadata '%s' lists '%s', which is not a tensor of this file",
                                name, FEATHER_HASH_KEY, feather_quote(c->string, q, sizeof q));
        if (seen[n->idx])
            return feather_fail(err, FEATHER_E_INVALID,
                                "%s: metadata '%s' lists '%s' twice", name, FEATHER_HASH_KEY,
                                feather_quote(c->string, q, sizeof q));
        seen[n->idx] = 1;
        h->hashes[n->idx] = v;
    }
    for (size_t i = 0; i < h->ntensors; i++)
        if (!seen[i])
            return feather_fail(err, FEATHER_E_INVALID,
                                "%s: tensor '%s': no hash in metadata '%s'", name,
                                feather_quote(h->tensors[i].name, q, sizeof q), FEATHER_HASH_KEY);
    return FEATHER_OK;
}

feather_status st_hashes_parse(st_header *h, const char *name, feather_error *err) {
    const char *rec = find_record(h);
    if (!rec) return FEATHER_OK;
    char what[64];
    snprintf(what, sizeof what, "metadata '%s'", FEATHER_HASH_KEY);
    json_scan scan;
    size_t len = strlen(rec);
    feather_status st = json_scan_run(&scan, (const uint8_t *)rec, len, name, what, err);
    json_scan_free(&scan);
    if (st) return st;
    cJSON *root = cJSON_ParseWithLengthOpts(rec, len, NULL, 0);
    if (!root)
        return feather_fail(err, FEATHER_E_INVALID, "%s: metadata '%s' is not valid JSON " JSON_DISAGREE,
                            name, FEATHER_HASH_KEY);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return feather_fail(err, FEATHER_E_INVALID,
                            "%s: metadata '%s' is not a JSON object of tensor hashes", name,
                            FEATHER_HASH_KEY);
    }
    named *sorted = malloc((h->ntensors ? h->ntensors : 1) * sizeof *sorted);
    unsigned char *seen = calloc(h->ntensors ? h->ntensors : 1, 1);
    h->hashes = malloc((h->ntensors ? h->ntensors : 1) * sizeof *h->hashes);
    if (!sorted || !seen || !h->hashes) {
        st = feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", name);
    } else {
        for (size_t i = 0; i < h->ntensors; i++) sorted[i] = (named){h->tensors[i].name, i};
        qsort(sorted, h->ntensors, sizeof *sorted, cmp_named);
        st = fill(h, root, sorted, seen, name, err);
    }
    free(sorted);
    free(seen);
    cJSON_Delete(root);
    if (st) {
        free(h->hashes);
        h->hashes = NULL;
    }
    return st;
}

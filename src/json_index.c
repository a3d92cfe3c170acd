/*
 * A JSON object's members found by name in O(log n). cJSON finds a member by walking its list,
 * and the objects feather looks up once per tensor (feather.tensors, ComfyUI's
 * _quantization_metadata layers) have a member per tensor: walked per tensor, a file of 93 696
 * tensors spent most of its verification in strcmp.
 */
#include "internal.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

typedef struct member {
    const cJSON *item;
    size_t pos;
} member;

/* By name, then by position: among members of one name the first comes first, the one cJSON
 * would find. */
static int cmp_member(const void *a, const void *b) {
    const member *x = a, *y = b;
    int c = strcmp(x->item->string, y->item->string);
    return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

int feather_json_index_init(feather_json_index *ix, const cJSON *obj) {
    ix->m = NULL;
    ix->n = 0;
    if (!cJSON_IsObject(obj)) return 0;
    size_t n = 0;
    for (const cJSON *c = obj->child; c; c = c->next) n += c->string != NULL;
    if (!n) return 0;
    member *m = malloc(n * sizeof *m);
    if (!m) return -1;
    size_t i = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        if (c->string) m[i] = (member){c, i}, i++;
    qsort(m, n, sizeof *m, cmp_member);
    ix->m = m;
    ix->n = n;
    return 0;
}

const cJSON *feather_json_index_get(const feather_json_index *ix, const char *name) {
    const member *m = ix->m;
    size_t lo = 0, hi = ix->n;
    if (!name) return NULL;
    while (lo < hi) { /* the first member not before name */
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(m[mid].item->string, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < ix->n && !strcmp(m[lo].item->string, name) ? m[lo].item : NULL;
}

void feather_json_index_free(feather_json_index *ix) {
    free(ix->m);
    ix->m = NULL;
    ix->n = 0;
}

/*
 * Validation of one safetensors header, in the reference's order (huggingface/safetensors,
 * SafeTensors::read_metadata): length field, size limit, UTF-8 and JSON (json_scan.c does what
 * cJSON does not), schema, then the layout: tensors sorted by data_offsets must cover the data
 * section contiguously from 0, each holding exactly nelem * bits / 8 bytes, and the data must
 * end exactly at the end of the file.
 *
 * Intentionally stricter than the reference: every duplicate key is rejected (tensor names,
 * "__metadata__", fields inside a tensor entry, keys inside "__metadata__"). serde_json keeps
 * the last of two equal tensor names and fails on some other duplicates; parsers disagreeing on
 * which duplicate wins is how one file shows different tensors to different readers.
 * Also stricter: "dtype" must be a string (serde accepts the map form {"F32": null}), names and
 * metadata cannot contain "\u0000", and number literals longer than 63 characters are refused.
 * Unknown fields inside a tensor entry are ignored, like the reference does.
 */
#include "reader_internal.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define META_KEY "__metadata__"

/* Parsing state shared by the helpers below. */
typedef struct parse {
    st_header *h;
    const json_scan *scan;
    const char *name;
    feather_error *err;
    const cJSON *meta;  /* the __metadata__ object, or NULL */
    const char *text;   /* the header JSON */
    int open_end;       /* file size unknown: report the data length instead of checking it */
} parse;

const char *feather_shape_str(const feather_tensor *t, char *buf, size_t len) {
    size_t o = 0;
    int n = snprintf(buf, len, "[");
    o = n > 0 ? (size_t)n : 0;
    for (unsigned i = 0; i < t->ndim && o < len; i++) {
        if (o + 32 >= len) {
            snprintf(buf + o, len - o, "...]");
            return buf;
        }
        n = snprintf(buf + o, len - o, "%s%llu", i ? ", " : "", (unsigned long long)t->shape[i]);
        o += n > 0 ? (size_t)n : 0;
    }
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}

/* What a file whose first eight bytes are no plausible header length is, where its magic says:
 * the formats checkpoints also come in. NULL for anything else. */
static const char *other_format(const uint8_t *b) {
    if (!memcmp(b, "PK\x03\x04", 4))
        return "a zip archive, as PyTorch saves .pt, .pth, .ckpt and .bin checkpoints: load it with torch and save "
               "it with safetensors first";
    if (b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
        return "a Python pickle, as older PyTorch .ckpt and .bin checkpoints are: load it with torch and save it "
               "with safetensors first";
    if (!memcmp(b, "GGUF", 4)) return "a GGUF file, a format of its own (llama.cpp, ComfyUI-GGUF)";
    if (!memcmp(b, "\x28\xb5\x2f\xfd", 4))
        return "zstd-compressed: name it NAME.safetensors.zst to have it read through decompression";
    if (!memcmp(b, "\x1f\x8b", 2)) return "gzip-compressed: decompress it first";
    if (!memcmp(b, "\x89HDF", 4)) return "an HDF5 file (Keras .h5)";
    return NULL;
}

feather_status st_header_len(const uint8_t *buf, size_t len, uint64_t file_size, const char *name,
                             uint64_t *n, feather_error *err) {
    if (file_size < 8)
        return feather_fail(err, FEATHER_E_INVALID,
                            "%s: file is %llu bytes, too short to hold the 8-byte header length",
                            name, (unsigned long long)file_size);
    if (len < 8)
        return feather_fail(err, FEATHER_E_ARG, "%s: only %zu bytes given, the header length needs 8",
                            name, len);
    uint64_t v = feather_rd64le(buf);
    const char *other = other_format(buf);
    if (other && (v > FEATHER_MAX_HEADER || v > file_size - 8))
        return feather_fail(err, FEATHER_E_INVALID, "%s: not a safetensors file: %s", name, other);
    /* Checked before anything is allocated or compared with the file, like the reference. */
    if (v > FEATHER_MAX_HEADER)
        return feather_fail(err, FEATHER_E_INVALID,
                            "%s: header length %llu exceeds the limit of %llu bytes", name,
                            (unsigned long long)v, FEATHER_MAX_HEADER);
    if (v > file_size - 8)
        return feather_fail(err, FEATHER_E_INVALID,
                            "%s: header length %llu runs past the end of the file (%llu bytes)",
                            name, (unsigned long long)v, (unsigned long long)file_size);
    *n = v;
    return FEATHER_OK;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

feather_status st_check_unique(const cJSON *obj, const char *name, const char *what,
                               feather_error *err) {
    size_t n = 0;
    for (const cJSON *c = obj->child; c; c = c->next) n++;
    if (n < 2) return FEATHER_OK;
    if (n <= 8) { /* a tensor entry: a few fields, no need to sort */
        for (const cJSON *a = obj->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (!strcmp(a->string, b->string)) {
                    char q[256];
                    return feather_fail(err, FEATHER_E_INVALID,
                                        "%s: %s'%s' appears twice (duplicate keys are rejected)",
                                        name, what, feather_quote(a->string, q, sizeof q));
                }
        return FEATHER_OK;
    }
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory", name);
    size_t i = 0;
    for (const cJSON *c = obj->child; c; c = c->next) keys[i++] = c->string;
    qsort(keys, n, sizeof *keys, cmp_str);
    feather_status st = FEATHER_OK;
    for (i = 1; i < n && !st; i++) {
        if (strcmp(keys[i - 1], keys[i]) == 0) {
            char q[256];
            st = feather_fail(err, FEATHER_E_INVALID,
                              "%s: %s'%s' appears twice (duplicate keys are rejected)", name, what,
                              feather_quote(keys[i], q, sizeof q));
        }
    }
    free(keys);
    return st;
}

static feather_status read_metadata(parse *p, const cJSON *m) {
    if (cJSON_IsNull(m)) return FEATHER_OK; /* what MLX writes for "no metadata" */
    if (!cJSON_IsObject(m))
        return feather_fail(p->err, FEATHER_E_INVALID,
                            "%s: __metadata__ must be an object of strings or null", p->name);
    feather_status st = st_check_unique(m, p->name, "__metadata__: key ", p->err);
    if (st) return st;
    for (const cJSON *c = m->child; c; c = c->next) {
        if (!cJSON_IsString(c)) {
            char q[256];
            return feather_fail(p->err, FEATHER_E_INVALID,
                                "%s: __metadata__ '%s': value is not a string", p->name,
                                feather_quote(c->string, q, sizeof q));
        }
        p->h->nmeta++;
    }
    p->meta = m;
    return FEATHER_OK;
}

static feather_status entry_fail(parse *p, const char *tensor, const char *fmt, ...)
    FEATHER_PRINTF(3, 4);
static feather_status entry_fail(parse *p, const char *tensor, const char *fmt, ...) {
    char q[256], rule[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rule, sizeof rule, fmt, ap);
    va_end(ap);
    return feather_fail(p->err, FEATHER_E_INVALID, "%s: tensor '%s': %s", p->name,
                        feather_quote(tensor, q, sizeof q), rule);
}

static const char *json_type(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    if (cJSON_IsBool(v)) return "a boolean";
    return "null";
}

/* The integers of a "shape" or "data_offsets" array, read from the raw tokens (cJSON only has
 * doubles, which cannot tell 2 from 2.0 and round above 2^53). */
static feather_status read_ints(parse *p, const char *tensor, const char *field, const cJSON *v,
                                size_t member, size_t index, const json_array **out) {
    if (!cJSON_IsArray(v))
        return entry_fail(p, tensor, "%s must be an array of integers, not %s", field,
                          json_type(v));
    const json_array *a = json_scan_find(p->scan, member, index);
    if (!a || (size_t)cJSON_GetArraySize(v) != a->count)
        return entry_fail(p, tensor, "%s cannot be read " JSON_DISAGREE, field);
    for (size_t k = 0; k < a->count; k++) {
        const json_elem *e = &p->scan->elems[a->first + k];
        const char *tok = p->text + e->offset;
        int len = (int)e->len;
        switch ((json_num_kind)e->kind) {
        case JSON_UINT: break;
        case JSON_NOT_NUMBER:
            return entry_fail(p, tensor, "%s[%zu] is not an integer", field, k);
        case JSON_TOO_BIG:
            return entry_fail(p, tensor, "%s[%zu] = %.*s exceeds 2^64-1", field, k, len, tok);
        case JSON_NEGATIVE:
        case JSON_FRACTION:
            return entry_fail(p, tensor, "%s[%zu] = %.*s is not a non-negative integer", field,
                              k, len, tok);
        }
    }
    *out = a;
    return FEATHER_OK;
}

static feather_status read_dtype(parse *p, const char *tensor, const cJSON *v, feather_tensor *t) {
    char q[64];
    if (!cJSON_IsString(v))
        return entry_fail(p, tensor, "dtype must be a string, not %s", json_type(v));
    if (feather_dtype_parse(v->valuestring, strlen(v->valuestring), &t->dtype))
        return entry_fail(p, tensor, "unknown dtype '%s'", feather_quote(v->valuestring, q, sizeof q));
    return FEATHER_OK;
}

/* One tensor entry: member is its position in the root object. */
static feather_status read_entry(parse *p, const cJSON *e, size_t member, feather_tensor *t) {
    const char *tensor = e->string;
    char prefix[300], q[256];
    if (!cJSON_IsObject(e))
        return entry_fail(p, tensor, "entry must be an object with dtype, shape and data_offsets, "
                                     "not %s", json_type(e));
    snprintf(prefix, sizeof prefix, "tensor '%s': field ", feather_quote(tensor, q, sizeof q));
    feather_status st = st_check_unique(e, p->name, prefix, p->err);
    if (st) return st;
    memset(t, 0, sizeof *t);
    t->name = tensor; /* cJSON's copy until copy_strings */
    unsigned have = 0;
    size_t j = 0;
    for (const cJSON *c = e->child; c; c = c->next, j++) {
        const json_array *a;
        if (!strcmp(c->string, "dtype")) {
            have |= 1;
            if ((st = read_dtype(p, tensor, c, t))) return st;
        } else if (!strcmp(c->string, "shape")) {
            have |= 2;
            if ((st = read_ints(p, tensor, "shape", c, member, j, &a))) return st;
            if (a->count > 0xffffffffu) return entry_fail(p, tensor, "shape has too many dimensions");
            t->ndim = (unsigned)a->count;
            t->shape = p->scan->values + a->first;
        } else if (!strcmp(c->string, "data_offsets")) {
            have |= 4;
            if ((st = read_ints(p, tensor, "data_offsets", c, member, j, &a))) return st;
            if (a->count != 2)
                return entry_fail(p, tensor, "data_offsets must hold two integers [begin, end], not %zu",
                                  a->count);
            t->begin = p->scan->values[a->first];
            t->end = p->scan->values[a->first + 1];
        }
        /* Any other field is ignored, as the reference does. */
    }
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};
    for (int f = 0; f < 3; f++)
        if (!(have & (1u << f))) return entry_fail(p, tensor, "missing field '%s'", fields[f]);
    return FEATHER_OK;
}

static feather_status read_root(parse *p, const cJSON *root) {
    st_header *h = p->h;
    size_t n = 0;
    for (const cJSON *c = root->child; c; c = c->next) n += strcmp(c->string, META_KEY) != 0;
    h->tensors = calloc(n ? n : 1, sizeof *h->tensors);
    if (!h->tensors) return feather_fail(p->err, FEATHER_E_NOMEM, "%s: out of memory", p->name);
    size_t member = 0;
    for (const cJSON *c = root->child; c; c = c->next, member++) {
        feather_status st = !strcmp(c->string, META_KEY)
                                ? read_metadata(p, c)
                                : read_entry(p, c, member, &h->tensors[h->ntensors++]);
        if (st) return st;
    }
    return FEATHER_OK;
}

typedef struct order {
    uint64_t begin, end;
    size_t idx;
} order;

static int cmp_order(const void *a, const void *b) {
    const order *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Sorts the tensors by (begin, end) the way the reference does before validating offsets; ties
 * (zero-sized tensors at one offset) keep header order. */
static feather_status sort_tensors(parse *p) {
    st_header *h = p->h;
    if (h->ntensors < 2) return FEATHER_OK;
    order *o = malloc(h->ntensors * sizeof *o);
    feather_tensor *sorted = malloc(h->ntensors * sizeof *sorted);
    if (!o || !sorted) {
        free(o);
        free(sorted);
        return feather_fail(p->err, FEATHER_E_NOMEM, "%s: out of memory", p->name);
    }
    for (size_t i = 0; i < h->ntensors; i++)
        o[i] = (order){h->tensors[i].begin, h->tensors[i].end, i};
    qsort(o, h->ntensors, sizeof *o, cmp_order);
    for (size_t i = 0; i < h->ntensors; i++) sorted[i] = h->tensors[o[i].idx];
    free(o);
    free(h->tensors);
    h->tensors = sorted;
    return FEATHER_OK;
}

/* Size of one tensor, with the reference's overflow checks in its order. */
static feather_status check_size(parse *p, feather_tensor *t) {
    char sh[160];
    const char *dt = feather_dtype_name(t->dtype);
    uint64_t nelem = 1, nbits;
    for (unsigned i = 0; i < t->ndim; i++)
        if (!feather_mul_ok(nelem, t->shape[i], &nelem))
            return entry_fail(p, t->name, "shape %s has more than 2^64-1 elements",
                              feather_shape_str(t, sh, sizeof sh));
    if (!feather_mul_ok(nelem, feather_dtype_bits(t->dtype), &nbits))
        return entry_fail(p, t->name, "%s %s is more than 2^64-1 bits", dt,
                          feather_shape_str(t, sh, sizeof sh));
    if (nbits % 8)
        return entry_fail(p, t->name, "%s %s is %llu bits, not a whole number of bytes", dt,
                          feather_shape_str(t, sh, sizeof sh), (unsigned long long)nbits);
    if (t->end - t->begin != nbits / 8)
        return entry_fail(p, t->name, "data_offsets [%llu, %llu] hold %llu bytes but %s %s needs %llu",
                          (unsigned long long)t->begin, (unsigned long long)t->end,
                          (unsigned long long)(t->end - t->begin), dt,
                          feather_shape_str(t, sh, sizeof sh), (unsigned long long)(nbits / 8));
    t->nelem = nelem;
    t->nbytes = nbits / 8;
    return FEATHER_OK;
}

/* The data section must be covered exactly, without holes or overlaps, from 0 to its end. */
static feather_status check_layout(parse *p) {
    st_header *h = p->h;
    uint64_t cursor = 0;
    for (size_t i = 0; i < h->ntensors; i++) {
        feather_tensor *t = &h->tensors[i];
        unsigned long long b = t->begin, e = t->end;
        if (t->end < t->begin)
            return entry_fail(p, t->name, "data_offsets [%llu, %llu] end before they begin", b, e);
        if (t->begin != cursor)
            return entry_fail(p, t->name,
                              "data_offsets [%llu, %llu] %s: this tensor should start at %llu "
                              "(tensors must cover the data contiguously from offset 0)",
                              b, e, t->begin > cursor ? "leave a gap" : "overlap other data",
                              (unsigned long long)cursor);
        feather_status st = check_size(p, t);
        if (st) return st;
        cursor = t->end;
    }
    if (p->open_end) {
        h->data_len = cursor;
        return FEATHER_OK;
    }
    if (cursor > h->data_len)
        return feather_fail(p->err, FEATHER_E_INVALID,
                            "%s: data is truncated: the tensors need %llu bytes after the header "
                            "but the file holds %llu", p->name, (unsigned long long)cursor,
                            (unsigned long long)h->data_len);
    if (cursor < h->data_len)
        return feather_fail(p->err, FEATHER_E_INVALID,
                            "%s: %llu bytes after the end of the last tensor's data (the tensors "
                            "cover %llu of %llu data bytes; their data must end the file)", p->name,
                            (unsigned long long)(h->data_len - cursor), (unsigned long long)cursor,
                            (unsigned long long)h->data_len);
    return FEATHER_OK;
}

static char *copy_str(char **dst, const char *s) {
    size_t n = strlen(s) + 1;
    char *r = memcpy(*dst, s, n);
    *dst += n;
    return r;
}

/* Names and metadata move out of the cJSON tree into one block, so the tree can go. */
static feather_status copy_strings(parse *p) {
    st_header *h = p->h;
    size_t total = 1;
    for (size_t i = 0; i < h->ntensors; i++) total += strlen(h->tensors[i].name) + 1;
    for (const cJSON *c = p->meta ? p->meta->child : NULL; c; c = c->next)
        total += strlen(c->string) + strlen(c->valuestring) + 2;
    h->strings = malloc(total);
    h->meta_key = malloc((h->nmeta ? h->nmeta : 1) * sizeof *h->meta_key);
    h->meta_value = malloc((h->nmeta ? h->nmeta : 1) * sizeof *h->meta_value);
    if (!h->strings || !h->meta_key || !h->meta_value)
        return feather_fail(p->err, FEATHER_E_NOMEM, "%s: out of memory", p->name);
    char *o = h->strings;
    for (size_t i = 0; i < h->ntensors; i++) h->tensors[i].name = copy_str(&o, h->tensors[i].name);
    size_t i = 0;
    for (const cJSON *c = p->meta ? p->meta->child : NULL; c; c = c->next, i++) {
        h->meta_key[i] = copy_str(&o, c->string);
        h->meta_value[i] = copy_str(&o, c->valuestring);
    }
    return FEATHER_OK;
}

/* Everything after the length checks, on the N header bytes. */
static feather_status parse_json(st_header *h, const uint8_t *text, const char *name,
                                 int open_end, feather_error *err) {
    json_scan scan;
    feather_status st = json_scan_run(&scan, text, h->header_len, name, "header", err);
    cJSON *root = NULL;
    if (st) goto out;
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts((const char *)text, h->header_len, &end, 0);
    if (!root) {
        st = feather_fail(err, FEATHER_E_INVALID, "%s: header is not valid JSON " JSON_DISAGREE, name);
        goto out;
    }
    /* The scan already allowed only whitespace after the value; this guards the two agreeing. */
    for (const char *c = end; c < (const char *)text + h->header_len && !st; c++)
        if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r')
            st = feather_fail(err, FEATHER_E_INVALID, "%s: bytes after the header's JSON " JSON_DISAGREE, name);
    if (st) goto out;
    if (!cJSON_IsObject(root)) {
        st = feather_fail(err, FEATHER_E_INVALID, "%s: header is %s, not a JSON object", name,
                          json_type(root));
        goto out;
    }
    parse p = {.h = h, .scan = &scan, .name = name, .err = err, .text = (const char *)text,
               .open_end = open_end};
    if ((st = st_check_unique(root, name, "key ", err)) || (st = read_root(&p, root)) ||
        (st = sort_tensors(&p)) || (st = check_layout(&p)) || (st = copy_strings(&p)))
        goto out;
    /* Shapes point into the scan's values, which the header now owns. */
    h->dims = scan.values;
    scan.values = NULL;
    st = st_hashes_parse(h, name, err);
out:
    if (st) {
        /* Tensor names may still point into the tree: never leave them dangling. */
        free(h->tensors);
        h->tensors = NULL;
        h->ntensors = 0;
    }
    cJSON_Delete(root);
    json_scan_free(&scan);
    return st;
}

static feather_status parse_file(st_header *h, const uint8_t *buf, size_t len, uint64_t file_size,
                                 int open_end, const char *name, feather_error *err) {
    memset(h, 0, sizeof *h);
    uint64_t n;
    feather_status st = st_header_len(buf, len, file_size, name, &n, err);
    if (st) return st;
    if (n > len - 8)
        return feather_fail(err, FEATHER_E_ARG, "%s: only %zu of the %llu header bytes given",
                            name, len - 8, (unsigned long long)n);
    h->header_len = n;
    h->data_len = file_size - 8 - n;
    return parse_json(h, buf + 8, name, open_end, err);
}

feather_status st_header_parse(st_header *h, const uint8_t *buf, size_t len, uint64_t file_size,
                               const char *name, feather_error *err) {
    return parse_file(h, buf, len, file_size, 0, name, err);
}

feather_status st_header_parse_prefix(st_header *h, const uint8_t *buf, size_t len,
                                      const char *name, feather_error *err) {
    return parse_file(h, buf, len, UINT64_MAX, 1, name, err);
}

void st_header_free(st_header *h) {
    free(h->tensors);
    free(h->meta_key);
    free(h->meta_value);
    free(h->hashes);
    free(h->dims);
    free(h->strings);
    memset(h, 0, sizeof *h);
}

feather_status feather_check_header(const uint8_t *buf, size_t len, uint64_t file_size,
                                    const char *name, feather_error *err) {
    st_header h;
    if (!buf && len) return feather_fail(err, FEATHER_E_ARG, "feather_check_header: no buffer");
    feather_status st = st_header_parse(&h, buf, len, file_size, name ? name : "header", err);
    st_header_free(&h);
    return st;
}

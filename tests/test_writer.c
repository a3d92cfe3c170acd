/* Safetensors writer: exact bytes (reference golden vectors), layout, escaping, hashes,
 * zstd output, and crash safety (errors, full disk, kill -9, signals). The header is parsed
 * here with cJSON, independently of the library's reader. */
#include "test.h"
#include "feather/feather.h"
#include "internal.h"
#include "outfile.h"

#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

/* ---- helpers ---- */

typedef struct tspec {
    const char *name;
    feather_dtype dtype;
    unsigned ndim;
    uint64_t shape[4];
} tspec;

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    unsigned char *b = malloc(cap);
    for (;;) {
        if (n == cap) b = realloc(b, cap *= 2);
        size_t r = fread(b + n, 1, cap - n, f);
        if (!r) break;
        n += r;
    }
    fclose(f);
    *len = n;
    return b;
}

static int write_text(const char *path, const char *s) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    fputs(s, f);
    return fclose(f);
}

static int exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

/* Number of entries in dir (no . and ..); names listed into 'names' for messages. */
static int dir_entries(const char *dir, char *names, size_t cap) {
    DIR *d = opendir(dir);
    int n = 0;
    if (names && cap) names[0] = 0;
    if (!d) return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        n++;
        if (names && strlen(names) + strlen(e->d_name) + 2 < cap) {
            strcat(names, e->d_name);
            strcat(names, " ");
        }
    }
    closedir(d);
    return n;
}

static const char *subdir(const char *name) {
    const char *p = test_path(name);
    mkdir(p, 0755);
    return p;
}

static const char *join(const char *dir, const char *name) {
    static char bufs[8][1100];
    static int slot;
    char *b = bufs[slot++ & 7];
    snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
    return b;
}

/* Deterministic bytes of a tensor, from its name. */
static unsigned char tensor_byte(const char *name, uint64_t i) {
    uint32_t h = 2166136261u;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 16777619u;
    return (unsigned char)((i * 131u + h + (i >> 9)) & 0xff);
}

/* Declares ts, the metadata pairs (key, value, …, NULL), begins and writes every tensor's
 * pattern bytes in chunks of 'chunk' bytes crossing tensor boundaries, then commits. */
static feather_status write_model(const char *path, const feather_write_options *o,
                                  const tspec *ts, size_t n, const char *const *meta,
                                  size_t chunk, feather_error *err) {
    feather_writer *w;
    feather_status st = feather_writer_open(&w, path, o, err);
    if (st) return st;
    for (size_t i = 0; meta && meta[i]; i += 2)
        if ((st = feather_writer_metadata(w, meta[i], meta[i + 1], err))) goto fail;
    for (size_t i = 0; i < n; i++)
        if ((st = feather_writer_tensor(w, ts[i].name, ts[i].dtype, ts[i].ndim, ts[i].shape, err)))
            goto fail;
    feather_writer_sort(w); /* the reference writer's order, for the golden bytes */
    if ((st = feather_writer_begin(w, err))) goto fail;
    uint64_t total = 0;
    for (size_t i = 0; i < feather_writer_count(w); i++) total += feather_writer_nbytes_at(w, i);
    unsigned char *all = malloc(total ? total : 1);
    uint64_t o2 = 0;
    for (size_t i = 0; i < feather_writer_count(w); i++) {
        const char *nm = feather_writer_name_at(w, i);
        for (uint64_t k = 0; k < feather_writer_nbytes_at(w, i); k++) all[o2++] = tensor_byte(nm, k);
    }
    for (uint64_t off = 0; off < total && !st; off += chunk)
        st = feather_writer_write(w, all + off, total - off < chunk ? total - off : chunk, err);
    free(all);
    if (st) goto fail;
    return feather_writer_commit(w, err);
fail:
    feather_writer_abort(w);
    return st;
}

/* Parses the header of a file image, checks the layout invariants every output must satisfy
 * (N multiple of 8, offsets contiguous from 0 in file order, file fully covered, recorded
 * hashes equal to XXH3 of the data, data equal to the pattern) and returns the JSON. */
static cJSON *check_file(const unsigned char *buf, size_t len, int expect_hashes) {
    if (len < 8) {
        test_fail(__FILE__, __LINE__, "file of %zu bytes", len);
        return NULL;
    }
    uint64_t n = feather_rd64le(buf);
    CHECK_EQ_U(n % 8, 0);
    if (8 + n > len) {
        test_fail(__FILE__, __LINE__, "N=%llu beyond file size %zu", (unsigned long long)n, len);
        return NULL;
    }
    for (uint64_t i = 0; i < n; i++)
        if (buf[8 + i] < 0x20) {
            test_fail(__FILE__, __LINE__, "raw control byte in header at %llu",
                      (unsigned long long)i);
            break;
        }
    cJSON *root = cJSON_ParseWithLength((const char *)buf + 8, n);
    if (!root) {
        test_fail(__FILE__, __LINE__, "header is not JSON");
        return NULL;
    }
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    const cJSON *hv = meta ? cJSON_GetObjectItemCaseSensitive(meta, FEATHER_HASH_KEY) : NULL;
    CHECK(!!hv == !!expect_hashes);
    cJSON *hashes = hv && cJSON_IsString(hv) ? cJSON_Parse(hv->valuestring) : NULL;
    if (expect_hashes) CHECK(hashes != NULL);
    if (meta) {
        CHECK(root->child == meta); /* metadata first */
        for (const cJSON *a = meta->child; a && a->next; a = a->next)
            CHECK(strcmp(a->string, a->next->string) < 0); /* keys sorted */
    }
    const unsigned char *data = buf + 8 + n;
    uint64_t cursor = 0;
    const cJSON *h = hashes ? hashes->child : NULL;
    for (const cJSON *t = root->child; t; t = t->next) {
        if (t == meta) continue;
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        if (cJSON_GetArraySize(off) != 2) {
            test_fail(__FILE__, __LINE__, "tensor %s: data_offsets malformed", t->string);
            break;
        }
        uint64_t b = (uint64_t)cJSON_GetArrayItem(off, 0)->valuedouble;
        uint64_t e = (uint64_t)cJSON_GetArrayItem(off, 1)->valuedouble;
        CHECK_EQ_U(b, cursor);
        CHECK(e >= b && 8 + n + e <= len);
        if (e < b || 8 + n + e > len) break;
        for (uint64_t k = b; k < e; k++)
            if (data[k] != tensor_byte(t->string, k - b)) {
                test_fail(__FILE__, __LINE__, "tensor %s byte %llu differs", t->string,
                          (unsigned long long)(k - b));
                break;
            }
        if (hashes) {
            /* Same tensors, same order. */
            CHECK(h && !strcmp(h->string, t->string));
            char want[17];
            snprintf(want, sizeof want, "%016llx",
                     (unsigned long long)XXH3_64bits(data + b, (size_t)(e - b)));
            CHECK(h && cJSON_IsString(h) && !strcmp(h->valuestring, want));
            if (h) h = h->next;
        }
        cursor = e;
    }
    CHECK(h == NULL);
    CHECK_EQ_U(8 + n + cursor, len);
    cJSON_Delete(hashes);
    return root;
}

static const feather_write_options no_hash_opts = {.no_hashes = 1};

/* ---- exact bytes ---- */

struct golden {
    const char *what;
    tspec t;
    const char *meta_key, *meta_value;
    const unsigned char *data;
    size_t data_len;
    uint64_t n;         /* expected N */
    const char *header; /* before padding */
};

TEST(writer_golden_bytes_match_reference) {
    /* Vectors from the reference crate's and Python binding's tests. */
    static const unsigned char f32_6[24] = {0}, f32_6b[24] = {1}, f4[1] = {0x21},
                               bf16[8] = {0x10, 0x40, 0x80, 0x3f, 0x80, 0x3f, 0x80, 0x3f};
    const struct golden g[] = {
        {"empty", {NULL, 0, 0, {0}}, NULL, NULL, NULL, 0, 8, "{}"},
        {"metadata", {NULL, 0, 0, {0}}, "framework", "pt", NULL, 0, 40,
         "{\"__metadata__\":{\"framework\":\"pt\"}}"},
        {"f32", {"attn.0", FEATHER_F32, 3, {1, 2, 3}}, NULL, NULL, f32_6, 24, 64,
         "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}"},
        {"f32 padded", {"attn0", FEATHER_F32, 4, {1, 1, 2, 3}}, NULL, NULL, f32_6b, 24, 72,
         "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}"},
        {"f4", {"attn.0", FEATHER_F4, 2, {1, 2}}, NULL, NULL, f4, 1, 64,
         "{\"attn.0\":{\"dtype\":\"F4\",\"shape\":[1,2],\"data_offsets\":[0,1]}}"},
        {"bf16", {"test", FEATHER_BF16, 2, {2, 2}}, NULL, NULL, bf16, 8, 64,
         "{\"test\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,8]}}"},
    };
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        const char *path = test_path("golden.safetensors");
        unlink(path);
        feather_error err = {0};
        feather_writer *w;
        REQUIRE(feather_writer_open(&w, path, &no_hash_opts, &err) == FEATHER_OK);
        if (g[i].meta_key) CHECK(feather_writer_metadata(w, g[i].meta_key, g[i].meta_value, &err) == 0);
        if (g[i].t.name)
            CHECK(feather_writer_tensor(w, g[i].t.name, g[i].t.dtype, g[i].t.ndim, g[i].t.shape,
                                        &err) == 0);
        CHECK(feather_writer_begin(w, &err) == FEATHER_OK);
        CHECK(feather_writer_write(w, g[i].data, g[i].data_len, &err) == FEATHER_OK);
        CHECK(feather_writer_commit(w, &err) == FEATHER_OK);

        size_t hl = strlen(g[i].header);
        size_t want_len = 8 + g[i].n + g[i].data_len;
        unsigned char *want = malloc(want_len);
        feather_wr64le(want, g[i].n);
        memcpy(want + 8, g[i].header, hl);
        memset(want + 8 + hl, ' ', g[i].n - hl);
        if (g[i].data_len) memcpy(want + 8 + g[i].n, g[i].data, g[i].data_len);
        size_t len;
        unsigned char *got = read_all(path, &len);
        REQUIRE(got);
        if (len != want_len || memcmp(got, want, len))
            test_fail(__FILE__, __LINE__, "%s: %zu bytes, want %zu: '%.*s'", g[i].what, len,
                      want_len, (int)(len > 8 ? len - 8 : 0), (const char *)got + 8);
        free(got);
        free(want);
    }
}

TEST(writer_layout_order_and_offsets) {
    /* Declared shuffled; laid out dtype descending (enum order), then name bytewise. */
    const tspec ts[] = {
        {"b", FEATHER_F16, 1, {3}},       {"c", FEATHER_U8, 1, {5}},
        {"a", FEATHER_F32, 2, {2, 2}},    {"a2", FEATHER_F16, 1, {1}},
        {"\xc3\xa9", FEATHER_F16, 0, {0}}, {"Z", FEATHER_F16, 2, {0, 7}},
        {"z", FEATHER_U64, 1, {2}},       {"m", FEATHER_BOOL, 1, {3}},
        {"q", FEATHER_F8_E5M2, 1, {4}},   {"p", FEATHER_F8_E4M3, 1, {4}},
        {"f4", FEATHER_F4, 1, {6}},       {"f6", FEATHER_F6_E3M2, 1, {4}},
    };
    const char *want[] = {"z", "a", "Z", "a2", "b", "\xc3\xa9", "p", "q", "c", "f6", "f4", "m"};
    const char *path = test_path("order.safetensors");
    feather_error err = {0};
    feather_writer *w;
    REQUIRE(feather_writer_open(&w, path, NULL, &err) == FEATHER_OK);
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        CHECK(feather_writer_tensor(w, ts[i].name, ts[i].dtype, ts[i].ndim, ts[i].shape, &err) == 0);
    feather_writer_sort(w);
    REQUIRE(feather_writer_begin(w, &err) == FEATHER_OK);
    REQUIRE(feather_writer_count(w) == sizeof want / sizeof want[0]);
    uint64_t total = 0;
    for (size_t i = 0; i < feather_writer_count(w); i++) {
        CHECK(!strcmp(feather_writer_name_at(w, i), want[i]));
        total += feather_writer_nbytes_at(w, i);
    }
    CHECK_EQ_U(feather_writer_nbytes_at(w, 0), 16);  /* U64 [2] */
    CHECK_EQ_U(feather_writer_nbytes_at(w, 2), 0);   /* F16 [0,7] */
    CHECK_EQ_U(feather_writer_nbytes_at(w, 5), 2);   /* F16 scalar */
    CHECK_EQ_U(feather_writer_nbytes_at(w, 9), 3);   /* F6 [4] */
    CHECK_EQ_U(feather_writer_nbytes_at(w, 10), 3);  /* F4 [6] */
    feather_writer_abort(w);
    CHECK(!exists(path));

    /* Same declarations written for real: the header lists them in that order. */
    REQUIRE(write_model(path, NULL, ts, sizeof ts / sizeof ts[0], NULL, 3, &err) == FEATHER_OK);
    size_t len;
    unsigned char *buf = read_all(path, &len);
    REQUIRE(buf);
    cJSON *root = check_file(buf, len, 1);
    REQUIRE(root);
    size_t i = 0;
    for (const cJSON *t = root->child; t; t = t->next) {
        if (!strcmp(t->string, "__metadata__")) continue;
        CHECK(i < sizeof want / sizeof want[0] && !strcmp(t->string, want[i]));
        i++;
    }
    CHECK_EQ_U(i, sizeof want / sizeof want[0]);
    CHECK_EQ_U(len - 8 - feather_rd64le(buf), total);
    cJSON_Delete(root);
    free(buf);
}

/* ---- determinism and hashes ---- */

static const tspec model[] = {
    {"model.embed.weight", FEATHER_F16, 2, {64, 33}},
    {"model.layers.0.attn.q.weight", FEATHER_BF16, 2, {32, 32}},
    {"model.layers.0.attn.q.bias", FEATHER_F32, 1, {32}},
    {"model.norm.scale", FEATHER_F32, 0, {0}},
    {"empty", FEATHER_F16, 2, {0, 4}},
    {"lm_head.weight", FEATHER_F8_E5M2, 2, {17, 31}},
    {"counts", FEATHER_I64, 1, {5}},
};
static const char *const model_meta[] = {"format", "pt", "zeta", "last", "alpha", "first", NULL};
#define NMODEL (sizeof model / sizeof model[0])

TEST(writer_deterministic_and_hashes_recorded) {
    feather_error err = {0};
    const char *a = test_path("a.safetensors"), *b = test_path("b.safetensors");
    /* Different chunkings of the same bytes must give the same file. */
    REQUIRE(write_model(a, NULL, model, NMODEL, model_meta, 1000, &err) == FEATHER_OK);
    REQUIRE(write_model(b, NULL, model, NMODEL, model_meta, 7, &err) == FEATHER_OK);
    size_t la, lb;
    unsigned char *ba = read_all(a, &la), *bb = read_all(b, &lb);
    REQUIRE(ba && bb);
    CHECK(la == lb && !memcmp(ba, bb, la));
    cJSON *root = check_file(ba, la, 1);
    REQUIRE(root);
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    CHECK_EQ_U(cJSON_GetArraySize(meta), 4); /* three given + the hashes */
    CHECK(!strcmp(meta->child->string, "alpha"));
    CHECK(!strcmp(cJSON_GetObjectItemCaseSensitive(meta, "zeta")->valuestring, "last"));
    /* Placeholders were replaced: no hash is all zeros. */
    CHECK(!strstr((const char *)ba + 8, "0000000000000000"));
    cJSON_Delete(root);
    free(ba);
    free(bb);

    CHECK_EQ_U(feather_hash("abc", 3), XXH3_64bits("abc", 3));
    CHECK_EQ_U(feather_hash(NULL, 0), XXH3_64bits("", 0));
}

TEST(writer_no_hashes_option) {
    feather_error err = {0};
    const char *a = test_path("nh.safetensors");
    REQUIRE(write_model(a, &no_hash_opts, model, NMODEL, NULL, 4096, &err) == FEATHER_OK);
    size_t la;
    unsigned char *ba = read_all(a, &la);
    REQUIRE(ba);
    cJSON *root = check_file(ba, la, 0);
    CHECK(root && !cJSON_GetObjectItemCaseSensitive(root, "__metadata__"));
    cJSON_Delete(root);
    free(ba);
}

/* ---- escaping ---- */

TEST(writer_escapes_names_and_metadata) {
    const char *names[] = {
        "quote\"d",   "back\\slash", "ctl\x01\x1f\x7f", "nl\nt\tcr\r\b\f",
        "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "emoji\xf0\x9f\x98\x80", "sl/ash",
        "\\\"\\\"",
    };
    enum { NN = sizeof names / sizeof names[0] };
    tspec ts[NN];
    for (int i = 0; i < NN; i++) ts[i] = (tspec){names[i], FEATHER_F16, 1, {(uint64_t)i + 1}};
    const char *const meta[] = {"k\"ey\\\x02", "v\"al\n\xe2\x82\xac", "plain", "", NULL};
    const char *path = test_path("esc.safetensors");
    feather_error err = {0};
    REQUIRE(write_model(path, NULL, ts, NN, meta, 5, &err) == FEATHER_OK);
    size_t len;
    unsigned char *buf = read_all(path, &len);
    REQUIRE(buf);
    cJSON *root = check_file(buf, len, 1);
    REQUIRE(root);
    for (int i = 0; i < NN; i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, names[i]);
        CHECK(t != NULL);
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
        CHECK(sh && cJSON_GetArrayItem(sh, 0) &&
              cJSON_GetArrayItem(sh, 0)->valuedouble == (double)(i + 1));
    }
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "__metadata__");
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(m, meta[0]);
    CHECK(v && cJSON_IsString(v) && !strcmp(v->valuestring, meta[1]));
    v = cJSON_GetObjectItemCaseSensitive(m, "plain");
    CHECK(v && cJSON_IsString(v) && !strcmp(v->valuestring, ""));
    /* serde_json's forms: short escapes where JSON has them, \u00xx otherwise, DEL and UTF-8
     * as is. */
    const char *hdr = (const char *)buf + 8;
    size_t n = (size_t)feather_rd64le(buf);
    char *h = strndup(hdr, n);
    CHECK_STR_CONTAINS(h, "\"ctl\\u0001\\u001f\x7f\"");
    CHECK_STR_CONTAINS(h, "\"nl\\nt\\tcr\\r\\b\\f\"");
    CHECK_STR_CONTAINS(h, "\"quote\\\"d\"");
    CHECK_STR_CONTAINS(h, "\"caf\xc3\xa9\"");
    CHECK_STR_CONTAINS(h, "\"sl/ash\"");
    free(h);
    cJSON_Delete(root);
    free(buf);
}

TEST(writer_rejects_invalid_declarations) {
    const char *path = test_path("bad.safetensors");
    feather_error err = {0};
    feather_writer *w;
    REQUIRE(feather_writer_open(&w, path, NULL, &err) == FEATHER_OK);
    const uint64_t s1[] = {3}, s4[] = {4}, s1b[] = {1};
    const char *bad_utf8[] = {"\xff", "a\xc0\x80", "\xed\xa0\x80", "\xe6\x97", "\xf4\x90\x80\x80",
                              "\xc3", "\x80x", "\xf8\x88\x80\x80\x80"};
    for (size_t i = 0; i < sizeof bad_utf8 / sizeof bad_utf8[0]; i++) {
        CHECK(feather_writer_tensor(w, bad_utf8[i], FEATHER_F16, 1, s1, &err) == FEATHER_E_ARG);
        CHECK_STR_CONTAINS(err.message, "UTF-8");
        CHECK(feather_writer_metadata(w, bad_utf8[i], "v", &err) == FEATHER_E_ARG);
        CHECK(feather_writer_metadata(w, "k", bad_utf8[i], &err) == FEATHER_E_ARG);
    }
    CHECK(feather_writer_tensor(w, "", FEATHER_F16, 1, s1, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_tensor(w, NULL, FEATHER_F16, 1, s1, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_tensor(w, "__metadata__", FEATHER_F16, 1, s1, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_tensor(w, "x", FEATHER_DTYPE_COUNT, 1, s1, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_tensor(w, "x", FEATHER_F16, 2, NULL, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_metadata(w, "", "v", &err) == FEATHER_E_ARG);
    CHECK(feather_writer_metadata(w, "k", NULL, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_metadata(w, FEATHER_HASH_KEY, "{}", &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, FEATHER_HASH_KEY);
    /* Sub-byte dtypes must fill whole bytes. */
    CHECK(feather_writer_tensor(w, "f4odd", FEATHER_F4, 1, s1, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "f4odd");
    CHECK(feather_writer_tensor(w, "f6one", FEATHER_F6_E2M3, 1, s1b, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_tensor(w, "f6four", FEATHER_F6_E2M3, 1, s4, &err) == FEATHER_OK);
    /* Overflow, checked left to right like the reader. */
    const uint64_t big1[] = {1ull << 63, 2}, big2[] = {UINT64_MAX, 2, 0}, big3[] = {1ull << 61},
                   zero[] = {UINT64_MAX, 0};
    CHECK(feather_writer_tensor(w, "ov1", FEATHER_U8, 2, big1, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_tensor(w, "ov2", FEATHER_U8, 3, big2, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_tensor(w, "ov3", FEATHER_F64, 1, big3, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_tensor(w, "zero", FEATHER_U8, 2, zero, &err) == FEATHER_OK);
    /* Duplicates. */
    CHECK(feather_writer_tensor(w, "dup", FEATHER_F16, 1, s1, &err) == FEATHER_OK);
    CHECK(feather_writer_tensor(w, "dup", FEATHER_F32, 1, s1, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "dup");
    CHECK(feather_writer_metadata(w, "k", "1", &err) == FEATHER_OK);
    CHECK(feather_writer_metadata(w, "k", "2", &err) == FEATHER_E_ARG);
    /* Refused declarations leave the writer usable; exactly the accepted ones are written. */
    REQUIRE(feather_writer_begin(w, &err) == FEATHER_OK);
    CHECK_EQ_U(feather_writer_count(w), 3);
    CHECK(feather_writer_tensor(w, "late", FEATHER_F16, 1, s1, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_metadata(w, "late", "v", &err) == FEATHER_E_ARG);
    CHECK(feather_writer_begin(w, &err) == FEATHER_E_ARG);
    unsigned char data[9] = {0};
    CHECK(feather_writer_write(w, data, 9, &err) == FEATHER_OK);
    CHECK(feather_writer_commit(w, &err) == FEATHER_OK);
    CHECK(exists(path));

    /* Big offsets: tensors whose sizes fit 64 bits in bits but overflow when added. */
    const char *p2 = test_path("ovsum.safetensors");
    REQUIRE(feather_writer_open(&w, p2, NULL, &err) == FEATHER_OK);
    const uint64_t eighth[] = {(1ull << 61) - 1};
    for (int i = 0; i < 9; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "h%d", i & 15);
        CHECK(feather_writer_tensor(w, nm, FEATHER_U8, 1, eighth, &err) == FEATHER_OK);
    }
    CHECK(feather_writer_begin(w, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "overflow");
    feather_writer_abort(w);
    CHECK(!exists(p2));
}

TEST(writer_rejects_header_over_limit) {
    const char *path = test_path("huge.safetensors");
    feather_error err = {0};
    feather_writer *w;
    size_t n = FEATHER_MAX_HEADER; /* the value alone already fills the limit */
    char *v = malloc(n + 1);
    REQUIRE(v);
    memset(v, 'x', n);
    v[n] = 0;
    REQUIRE(feather_writer_open(&w, path, &no_hash_opts, &err) == FEATHER_OK);
    CHECK(feather_writer_metadata(w, "k", v, &err) == FEATHER_OK);
    CHECK(feather_writer_begin(w, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "100000000");
    feather_writer_abort(w);
    free(v);
    CHECK(!exists(path));
}

/* ---- misuse and write errors ---- */

TEST(writer_too_many_or_too_few_bytes) {
    const char *dir = subdir("count");
    const char *path = join(dir, "m.safetensors");
    const uint64_t s[] = {4};
    unsigned char data[16] = {0};
    feather_error err = {0};
    feather_writer *w;

    REQUIRE(feather_writer_open(&w, path, NULL, &err) == FEATHER_OK);
    CHECK(feather_writer_write(w, data, 1, &err) == FEATHER_E_ARG); /* before begin */
    CHECK(feather_writer_commit(w, &err) == FEATHER_E_ARG);         /* before begin; frees w */
    CHECK(!exists(path));

    REQUIRE(feather_writer_open(&w, path, NULL, &err) == FEATHER_OK);
    CHECK(feather_writer_tensor(w, "t", FEATHER_F16, 1, s, &err) == FEATHER_OK);
    REQUIRE(feather_writer_begin(w, &err) == FEATHER_OK);
    CHECK(feather_writer_write(w, data, 6, &err) == FEATHER_OK);
    CHECK(feather_writer_write(w, data, 3, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, path);
    CHECK_STR_CONTAINS(err.message, "past the end");
    /* The writer stays failed. */
    CHECK(feather_writer_write(w, data, 1, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_commit(w, &err) == FEATHER_E_ARG);
    CHECK(!exists(path));

    REQUIRE(feather_writer_open(&w, path, NULL, &err) == FEATHER_OK);
    CHECK(feather_writer_tensor(w, "t", FEATHER_F16, 1, s, &err) == FEATHER_OK);
    CHECK(feather_writer_tensor(w, "u", FEATHER_F16, 1, s, &err) == FEATHER_OK);
    REQUIRE(feather_writer_begin(w, &err) == FEATHER_OK);
    CHECK(feather_writer_write(w, data, 12, &err) == FEATHER_OK);
    CHECK(feather_writer_commit(w, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "'u'");
    CHECK_STR_CONTAINS(err.message, "12 of 16");
    CHECK(!exists(path));
    CHECK_EQ_U(dir_entries(dir, NULL, 0), 0);

    CHECK(feather_writer_write(NULL, data, 1, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_begin(NULL, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_commit(NULL, &err) == FEATHER_E_ARG);
    feather_writer_abort(NULL);
    CHECK(feather_writer_open(&w, "", NULL, &err) == FEATHER_E_ARG);
    CHECK(feather_writer_open(&w, join(dir, ""), NULL, &err) == FEATHER_E_ARG);
    feather_write_options bad = {.zstd_level = 1000};
    CHECK(feather_writer_open(&w, join(dir, "x.zst"), &bad, &err) == FEATHER_E_ARG);
}

TEST(writer_cancel_flag_stops_writes) {
    const char *dir = subdir("cancel");
    const char *path = join(dir, "c.safetensors");
    const uint64_t s[] = {4};
    unsigned char data[8] = {0};
    feather_error err = {0};
    feather_writer *w;
    REQUIRE(feather_writer_open(&w, path, NULL, &err) == FEATHER_OK);
    CHECK(feather_writer_tensor(w, "t", FEATHER_F16, 1, s, &err) == FEATHER_OK);
    REQUIRE(feather_writer_begin(w, &err) == FEATHER_OK);
    CHECK(feather_writer_write(w, data, 2, &err) == FEATHER_OK);
    feather_cancel();
    feather_status st = feather_writer_write(w, data, 2, &err);
    feather_cancel_reset();
    CHECK(st == FEATHER_E_CANCELLED);
    CHECK_STR_CONTAINS(err.message, path);
    feather_writer_abort(w);
    CHECK(!exists(path));
    CHECK_EQ_U(dir_entries(dir, NULL, 0), 0);
}

/* ---- existing outputs, inputs, directories ---- */

static void exists_cases(int named_temp) {
    feather_outfile_knobs.force_named_temp = named_temp;
    const char *dir = subdir(named_temp ? "exists-named" : "exists");
    const char *path = join(dir, "out.safetensors");
    feather_error err = {0};
    const tspec t[] = {{"w", FEATHER_F32, 1, {3}}};
    REQUIRE(write_text(path, "original") == 0);
    CHECK(write_model(path, NULL, t, 1, NULL, 4, &err) == FEATHER_E_EXISTS);
    CHECK_STR_CONTAINS(err.message, path);
    size_t len;
    unsigned char *b = read_all(path, &len);
    CHECK(b && len == 8 && !memcmp(b, "original", 8));
    free(b);

    feather_write_options ow = {.overwrite = 1};
    CHECK(write_model(path, &ow, t, 1, NULL, 4, &err) == FEATHER_OK);
    b = read_all(path, &len);
    REQUIRE(b);
    cJSON_Delete(check_file(b, len, 1));
    free(b);

    /* A file that appears while we write is not clobbered. */
    const char *p2 = join(dir, "late.safetensors");
    feather_writer *w;
    REQUIRE(feather_writer_open(&w, p2, NULL, &err) == FEATHER_OK);
    REQUIRE(feather_writer_begin(w, &err) == FEATHER_OK);
    REQUIRE(write_text(p2, "someone else") == 0);
    CHECK(feather_writer_commit(w, &err) == FEATHER_E_EXISTS);
    b = read_all(p2, &len);
    CHECK(b && len == 12 && !memcmp(b, "someone else", 12));
    free(b);

    /* A new name without overwrite. */
    const char *p3 = join(dir, "fresh.safetensors");
    CHECK(write_model(p3, NULL, t, 1, NULL, 4, &err) == FEATHER_OK);
    b = read_all(p3, &len);
    REQUIRE(b);
    cJSON_Delete(check_file(b, len, 1));
    free(b);

    /* Nothing else is left in the directory. */
    char names[512];
    CHECK_EQ_U(dir_entries(dir, names, sizeof names), 3);
    feather_outfile_knobs.force_named_temp = 0;
}

TEST(writer_existing_output) { exists_cases(0); }
TEST(writer_existing_output_named_temp) { exists_cases(1); }

TEST(writer_named_temp_removed_on_abort) {
    feather_outfile_knobs.force_named_temp = 1;
    const char *dir = subdir("named");
    const char *path = join(dir, "x.safetensors");
    feather_error err = {0};
    feather_writer *w;
    REQUIRE(feather_writer_open(&w, path, NULL, &err) == FEATHER_OK);
    char names[512];
    CHECK_EQ_U(dir_entries(dir, names, sizeof names), 1); /* the hidden temporary */
    CHECK(names[0] == '.' && strstr(names, ".x.safetensors."));
    REQUIRE(feather_writer_begin(w, &err) == FEATHER_OK);
    feather_writer_abort(w);
    CHECK_EQ_U(dir_entries(dir, names, sizeof names), 0);
    feather_outfile_knobs.force_named_temp = 0;
}

TEST(writer_refuses_to_overwrite_input) {
    const char *dir = subdir("inp");
    const char *in = join(dir, "in.safetensors");
    feather_error err = {0};
    const tspec t[] = {{"w", FEATHER_F32, 1, {3}}};
    REQUIRE(write_model(in, NULL, t, 1, NULL, 4, &err) == FEATHER_OK);
    size_t len0;
    unsigned char *orig = read_all(in, &len0);
    REQUIRE(orig);
    const char *link_h = join(dir, "hard.safetensors"), *link_s = join(dir, "soft.safetensors");
    REQUIRE(link(in, link_h) == 0);
    REQUIRE(symlink("in.safetensors", link_s) == 0);
    char dotted[1100];
    snprintf(dotted, sizeof dotted, "%s/../inp/./in.safetensors", dir);
    const char *inputs[] = {in};
    feather_write_options o = {.overwrite = 1, .inputs = inputs, .ninputs = 1};
    const char *outs[] = {in, link_h, link_s, dotted};
    for (size_t i = 0; i < 4; i++) {
        feather_writer *w = NULL;
        CHECK(feather_writer_open(&w, outs[i], &o, &err) == FEATHER_E_ARG);
        CHECK(w == NULL);
        CHECK_STR_CONTAINS(err.message, "output is the input file");
        CHECK_STR_CONTAINS(err.message, in);
    }
    /* The same, named the other way round: the input given through the link. */
    const char *inputs2[] = {link_s};
    feather_write_options o2 = {.overwrite = 1, .inputs = inputs2, .ninputs = 1};
    feather_writer *w;
    CHECK(feather_writer_open(&w, in, &o2, &err) == FEATHER_E_ARG);
    size_t len;
    unsigned char *now = read_all(in, &len);
    CHECK(now && len == len0 && !memcmp(now, orig, len));
    free(now);
    free(orig);
    /* A different output next to the input is fine. */
    CHECK(feather_writer_open(&w, join(dir, "other.safetensors"), &o, &err) == FEATHER_OK);
    feather_writer_abort(w);
}

/* feather_write_file: the whole file or nothing, under the writer's rules for existing files
 * and inputs. */
TEST(writer_write_file_whole_under_the_writers_rules) {
    const char *dir = subdir("wf");
    const char *path = join(dir, "report.json");
    feather_error err = {0};
    CHECK(feather_write_file(path, "{\"a\":1}\n", 8, NULL, &err) == FEATHER_OK);
    size_t len;
    unsigned char *b = read_all(path, &len);
    CHECK(b && len == 8 && !memcmp(b, "{\"a\":1}\n", 8));
    free(b);
    CHECK(feather_write_file(path, "x", 1, NULL, &err) == FEATHER_E_EXISTS); /* kept */
    b = read_all(path, &len);
    CHECK(b && len == 8);
    free(b);
    const char *inputs[] = {path};
    feather_write_options o = {.overwrite = 1, .inputs = inputs, .ninputs = 1};
    CHECK(feather_write_file(path, "x", 1, &o, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "output is the input file");
    o.ninputs = 0;
    CHECK(feather_write_file(path, "xy", 2, &o, &err) == FEATHER_OK); /* replaced */
    b = read_all(path, &len);
    CHECK(b && len == 2 && !memcmp(b, "xy", 2));
    free(b);
    CHECK(feather_write_file(join(dir, "missing/r.json"), "x", 1, &o, &err) == FEATHER_E_IO);
}

TEST(writer_directory_errors) {
    const char *dir = subdir("direrr");
    const char *file = join(dir, "regular");
    REQUIRE(write_text(file, "x") == 0);
    feather_error err = {0};
    feather_writer *w;
    const char *under_file = join(dir, "regular/out.safetensors");
    CHECK(feather_writer_open(&w, under_file, NULL, &err) == FEATHER_E_IO);
    CHECK_STR_CONTAINS(err.message, under_file);
    CHECK_STR_CONTAINS(err.message, strerror(ENOTDIR));
    const char *missing = join(dir, "nope/out.safetensors");
    CHECK(feather_writer_open(&w, missing, NULL, &err) == FEATHER_E_IO);
    CHECK_STR_CONTAINS(err.message, strerror(ENOENT));
    feather_write_options ow = {.overwrite = 1};
    const char *sub = join(dir, "sub");
    REQUIRE(mkdir(sub, 0755) == 0);
    CHECK(feather_writer_open(&w, sub, &ow, &err) == FEATHER_E_ARG);
}

/* A pipe and a fork: 0 in the child, which keeps the write end pfd[1]; the child's pid in the
 * parent, which keeps the read end pfd[0]; -1 where either failed (the test has failed). */
static pid_t fork_piped(int pfd[2]) {
    if (pipe(pfd) != 0) {
        test_fail(__FILE__, __LINE__, "pipe: %s", strerror(errno));
        return -1;
    }
    const pid_t pid = fork();
    if (pid < 0) {
        test_fail(__FILE__, __LINE__, "fork: %s", strerror(errno));
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    close(pid == 0 ? pfd[0] : pfd[1]);
    return pid;
}

/* Runs fn(arg, &err) in a forked child, which exits with fn's result (3 where it could not set
 * itself up); returns its wait status (-1 where it did not run), with the message err held in
 * msg. */
static int in_child(int (*fn)(const char *arg, feather_error *err), const char *arg, char msg[FEATHER_ERROR_MAX + 1]) {
    msg[0] = 0;
    int pfd[2];
    const pid_t pid = fork_piped(pfd);
    if (pid < 0) return -1;
    if (pid == 0) {
        feather_error err = {0};
        const int rc = fn(arg, &err);
        if (write(pfd[1], err.message, strlen(err.message)) < 0) _exit(4);
        _exit(rc);
    }
    ssize_t n = read(pfd[0], msg, FEATHER_ERROR_MAX);
    msg[n > 0 ? n : 0] = 0;
    close(pfd[0]);
    int status;
    waitpid(pid, &status, 0);
    return status;
}

/* As nobody where root: 0 where opening path fails with FEATHER_E_IO. */
static int open_unprivileged(const char *path, feather_error *err) {
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) return 3;
    feather_writer *w;
    return feather_writer_open(&w, path, NULL, err) == FEATHER_E_IO ? 0 : 1;
}

/* Permission denied needs a user the directory's mode applies to: root drops to nobody in a
 * child for this test. */
TEST(writer_permission_denied) {
    const char *dir = subdir("ro");
    REQUIRE(chmod(test_tmpdir(), 0755) == 0);
    REQUIRE(chmod(dir, 0555) == 0);
    const char *path = join(dir, "out.safetensors");
    char msg[FEATHER_ERROR_MAX + 1];
    const int status = in_child(open_unprivileged, path, msg);
    chmod(dir, 0755);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
        test_skip("cannot drop root privileges to test a read-only directory");
        return;
    }
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_STR_CONTAINS(msg, path);
    CHECK_STR_CONTAINS(msg, strerror(EACCES));
    CHECK(!exists(path));
}

/* ---- full disk, kill -9, signals (in forked children) ---- */

/* Under a 1 MiB RLIMIT_FSIZE (SIGXFSZ ignored, so write fails with EFBIG like a full disk
 * would with ENOSPC): 0 where writing a 3 MiB tensor to path fails with FEATHER_E_IO. */
static int write_past_limit(const char *path, feather_error *err) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {1 << 20, 1 << 20};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0) return 3;
    const tspec t[] = {{"w", FEATHER_U8, 1, {3 << 20}}};
    return write_model(path, NULL, t, 1, NULL, 256 << 10, err) == FEATHER_E_IO ? 0 : 1;
}

/* A child that hits the file size limit. 'chunked': the failure comes from a write inside
 * feather_writer_write (small buffer); otherwise from the flush at commit. */
static void full_disk_case(int chunked) {
    const char *dir = subdir(chunked ? "full-w" : "full-c");
    const char *path = join(dir, "big.safetensors");
    if (chunked) feather_outfile_knobs.buffer_size = 64 << 10; /* the child's copy of it */
    char msg[FEATHER_ERROR_MAX + 1];
    const int status = in_child(write_past_limit, path, msg);
    feather_outfile_knobs.buffer_size = 0;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_STR_CONTAINS(msg, path);
    CHECK_STR_CONTAINS(msg, strerror(EFBIG));
    char names[512];
    CHECK_EQ_U(dir_entries(dir, names, sizeof names), 0);
}

TEST(writer_full_disk_during_write) { full_disk_case(1); }
TEST(writer_full_disk_at_commit) { full_disk_case(0); }

static int tmpfile_supported(const char *dir) {
    int fd = open(dir, O_TMPFILE | O_WRONLY, 0600);
    if (fd < 0) return 0;
    close(fd);
    return 1;
}

/* The child writes a 8 MiB tensor in 64 KiB pieces (small buffer, so bytes reach the file),
 * says when 1 MiB is out, and keeps going slowly. */
static void slow_writer_child(const char *path, int notify_fd) {
    feather_outfile_knobs.buffer_size = 64 << 10;
    feather_error err = {0};
    feather_writer *w;
    const uint64_t shape[] = {8 << 20};
    if (feather_writer_open(&w, path, NULL, &err) ||
        feather_writer_tensor(w, "w", FEATHER_U8, 1, shape, &err) ||
        feather_writer_begin(w, &err))
        _exit(3);
    static unsigned char chunk[64 << 10];
    memset(chunk, 0x5a, sizeof chunk);
    feather_status st = FEATHER_OK;
    for (int i = 0; i < 128 && !st; i++) {
        st = feather_writer_write(w, chunk, sizeof chunk, &err);
        if (i == 16 && write(notify_fd, "x", 1) != 1) _exit(4);
        if (i >= 16) {
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    if (st == FEATHER_E_CANCELLED && strstr(err.message, path)) {
        feather_writer_abort(w);
        _exit(0);
    }
    feather_writer_abort(w);
    _exit(st == FEATHER_OK ? 5 : 6);
}

static void on_signal(int sig);

/* Forks a slow_writer_child writing path (sig: a signal that cancels it, or 0); returns its pid
 * once its first MiB is out (-1 where it did not start). */
static pid_t start_slow_writer(const char *path, int sig) {
    int pfd[2];
    const pid_t pid = fork_piped(pfd);
    if (pid < 0) return -1;
    if (pid == 0) {
        if (sig) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_signal;
            sigaction(sig, &sa, NULL);
            feather_cancel_reset();
        }
        slow_writer_child(path, pfd[1]);
    }
    char c;
    CHECK(read(pfd[0], &c, 1) == 1);
    close(pfd[0]);
    return pid;
}

TEST(writer_output_has_no_name_until_commit) {
    const char *dir = subdir("anon");
    if (!tmpfile_supported(dir)) {
        test_skip("filesystem without O_TMPFILE: the output is built under a hidden name");
        return;
    }
    const char *path = join(dir, "m.safetensors");
    feather_outfile_knobs.buffer_size = 4096;
    feather_error err = {0};
    feather_writer *w;
    const uint64_t shape[] = {1 << 16};
    static unsigned char data[1 << 16];
    REQUIRE(feather_writer_open(&w, path, NULL, &err) == FEATHER_OK);
    CHECK(feather_writer_tensor(w, "w", FEATHER_U8, 1, shape, &err) == FEATHER_OK);
    CHECK(feather_writer_begin(w, &err) == FEATHER_OK);
    CHECK(feather_writer_write(w, data, sizeof data, &err) == FEATHER_OK);
    CHECK_EQ_U(dir_entries(dir, NULL, 0), 0);
    CHECK(feather_writer_commit(w, &err) == FEATHER_OK);
    char names[512];
    CHECK_EQ_U(dir_entries(dir, names, sizeof names), 1);
    CHECK(exists(path));
    feather_outfile_knobs.buffer_size = 0;
}

TEST(writer_kill9_leaves_nothing) {
    const char *dir = subdir("kill");
    if (!tmpfile_supported(dir)) {
        test_skip("filesystem without O_TMPFILE: a killed writer leaves its hidden temporary");
        return;
    }
    const char *path = join(dir, "m.safetensors");
    const pid_t pid = start_slow_writer(path, 0);
    if (pid < 0) return;
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    char names[512];
    CHECK_EQ_U(dir_entries(dir, names, sizeof names), 0);
    CHECK(!exists(path));
}

static void on_signal(int sig) {
    (void)sig;
    feather_cancel();
}

static void signal_case(int sig) {
    const char *dir = subdir(sig == SIGINT ? "sigint" : "sigterm");
    const char *path = join(dir, "m.safetensors");
    const pid_t pid = start_slow_writer(path, sig);
    if (pid < 0) return;
    kill(pid, sig);
    int status;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK_EQ_U(WEXITSTATUS(status), 0); /* write returned CANCELLED naming the file */
    char names[512];
    CHECK_EQ_U(dir_entries(dir, names, sizeof names), 0);
}

TEST(writer_sigterm_cancels) { signal_case(SIGTERM); }
TEST(writer_sigint_cancels) { signal_case(SIGINT); }

/* ---- zstd ---- */

static unsigned char *zstd_decompress_all(const unsigned char *src, size_t n, size_t *out_len,
                                          int *frames) {
    ZSTD_DStream *ds = ZSTD_createDStream();
    size_t cap = 1 << 20, len = 0;
    unsigned char *out = malloc(cap);
    ZSTD_inBuffer in = {src, n, 0};
    *frames = 0;
    while (in.pos < in.size) {
        if (len == cap) out = realloc(out, cap *= 2);
        ZSTD_outBuffer o = {out + len, cap - len, 0};
        size_t r = ZSTD_decompressStream(ds, &o, &in);
        if (ZSTD_isError(r)) {
            test_fail(__FILE__, __LINE__, "zstd: %s", ZSTD_getErrorName(r));
            break;
        }
        len += o.pos;
        if (r == 0) ++*frames;
    }
    ZSTD_freeDStream(ds);
    *out_len = len;
    return out;
}

static void zstd_case(const feather_write_options *zo, int many) {
    const char *dir = subdir("zstd");
    char plain[1100], zst[1110];
    snprintf(plain, sizeof plain, "%s/m%d%d.safetensors", dir, zo->zstd_threads, many);
    snprintf(zst, sizeof zst, "%s.zst", plain);
    /* 'many': a header well over one raw block (128 KiB), hashes spread across blocks. */
    size_t n = many ? 9000 : NMODEL;
    tspec *ts = calloc(n, sizeof *ts);
    char (*names)[24] = calloc(n, sizeof *names);
    for (size_t i = 0; i < n; i++) {
        if (!many) {
            ts[i] = model[i];
            continue;
        }
        snprintf(names[i], sizeof names[i], "layer.%zu.w", i);
        ts[i] = (tspec){names[i], i % 3 ? FEATHER_F16 : FEATHER_BF16, 1, {i % 50}};
    }
    if (many) ts[0] = (tspec){"big", FEATHER_U8, 1, {3 << 20}};
    feather_error err = {0};
    feather_write_options po = {.overwrite = 1};
    REQUIRE(write_model(plain, &po, ts, n, model_meta, 100000, &err) == FEATHER_OK);
    feather_write_options z = *zo;
    z.overwrite = 1;
    REQUIRE(write_model(zst, &z, ts, n, model_meta, 100000, &err) == FEATHER_OK);
    free(ts);
    free(names);

    size_t lp, lz, ld;
    unsigned char *bp = read_all(plain, &lp), *bz = read_all(zst, &lz);
    REQUIRE(bp && bz);
    CHECK(bz[0] == 0x28 && bz[1] == 0xB5 && bz[2] == 0x2F && bz[3] == 0xFD);
    CHECK(lz < lp);
    int frames;
    unsigned char *bd = zstd_decompress_all(bz, lz, &ld, &frames);
    CHECK_EQ_U(frames, 2); /* the raw header frame, then the data */
    CHECK(ld == lp && !memcmp(bd, bp, lp));
    cJSON_Delete(check_file(bp, lp, 1));
    free(bd);

    /* The command-line tool agrees (it checks the data frame's checksum too). */
    char out[1200];
    snprintf(out, sizeof out, "%s.d", plain);
    CHECK(test_run("zstd -q -d -f '%s' -o '%s'", zst, out) == 0);
    unsigned char *bt = read_all(out, &ld);
    CHECK(bt && ld == lp && !memcmp(bt, bp, lp));
    free(bt);
    free(bp);
    free(bz);
}

TEST(writer_zstd_output_decompresses_to_plain) {
    feather_write_options z = {0};
    zstd_case(&z, 0);
}

TEST(writer_zstd_large_header_and_threads) {
    feather_write_options z = {.zstd_threads = 2, .zstd_level = 1};
    zstd_case(&z, 1);
}

TEST(writer_zstd_deterministic) {
    const char *dir = subdir("zdet");
    const char *a = join(dir, "a.safetensors.zst"), *b = join(dir, "b.safetensors.zst");
    feather_error err = {0};
    feather_write_options z = {.zstd_level = 5};
    REQUIRE(write_model(a, &z, model, NMODEL, model_meta, 333, &err) == FEATHER_OK);
    REQUIRE(write_model(b, &z, model, NMODEL, model_meta, 100000, &err) == FEATHER_OK);
    size_t la, lb;
    unsigned char *ba = read_all(a, &la), *bb = read_all(b, &lb);
    CHECK(ba && bb && la == lb && !memcmp(ba, bb, la));
    free(ba);
    free(bb);
    /* No tensors: just the header frame. */
    const char *e = join(dir, "empty.safetensors.zst");
    REQUIRE(write_model(e, &no_hash_opts, NULL, 0, NULL, 1, &err) == FEATHER_OK);
    unsigned char *be = read_all(e, &la);
    int frames;
    unsigned char *bd = zstd_decompress_all(be, la, &lb, &frames);
    CHECK(lb == 16 && !memcmp(bd + 8, "{}      ", 8));
    CHECK_EQ_U(frames, 1);
    free(bd);
    free(be);
}

/* Without feather_writer_sort the file keeps the declaration order (a converter writes each
 * tensor as it produces it), and a reserved metadata value is filled in at the end. */
TEST(writer_declaration_order_and_reserved_metadata) {
    const char *path = test_path("decl.safetensors");
    feather_error err = {0};
    feather_writer *w;
    REQUIRE(feather_writer_open(&w, path, NULL, &err) == FEATHER_OK);
    uint64_t s4[1] = {4}, s2[1] = {2};
    REQUIRE(feather_writer_tensor(w, "b", FEATHER_U8, 1, s4, &err) == FEATHER_OK);
    REQUIRE(feather_writer_tensor(w, "a", FEATHER_F32, 1, s2, &err) == FEATHER_OK);
    REQUIRE(feather_writer_metadata_reserve(w, "late", 16, &err) == FEATHER_OK);
    REQUIRE(feather_writer_metadata(w, "early", "x", &err) == FEATHER_OK);
    REQUIRE(feather_writer_begin(w, &err) == FEATHER_OK);
    CHECK(!strcmp(feather_writer_name_at(w, 0), "b") && !strcmp(feather_writer_name_at(w, 1), "a"));
    CHECK(feather_writer_metadata_fill(w, "late", "short", &err) == FEATHER_E_ARG);
    CHECK(feather_writer_metadata_fill(w, "early", "x", &err) == FEATHER_E_ARG);
    CHECK(feather_writer_metadata_fill(w, "late", "0123456789abcde\"", &err) == FEATHER_E_ARG);
    CHECK(feather_writer_metadata_fill(w, "late", "0123456789abcd\xff\xfe", &err) == FEATHER_E_ARG);
    const uint8_t data[12] = {1, 2, 3, 4, 0, 0, 128, 63, 0, 0, 0, 64};
    REQUIRE(feather_writer_write(w, data, sizeof data, &err) == FEATHER_OK);
    REQUIRE(feather_writer_metadata_fill(w, "late", "fedcba9876543210", &err) == FEATHER_OK);
    REQUIRE(feather_writer_commit(w, &err) == FEATHER_OK);
    feather_reader *r;
    REQUIRE(feather_open(&r, path, 0, &err) == FEATHER_OK);
    CHECK(!strcmp(feather_metadata_get(r, 0, "late"), "fedcba9876543210"));
    CHECK(!strcmp(feather_tensor_at(r, 0)->name, "b") && feather_tensor_at(r, 0)->begin == 0);
    const void *d;
    REQUIRE(feather_tensor_data(r, feather_find(r, "a"), &d, &err) == FEATHER_OK);
    CHECK(!memcmp(d, data + 4, 8));
    feather_close(r);
    /* Committing with a reserved value never filled is refused and leaves nothing. */
    const char *p2 = test_path("unfilled.safetensors");
    REQUIRE(feather_writer_open(&w, p2, NULL, &err) == FEATHER_OK);
    REQUIRE(feather_writer_metadata_reserve(w, "late", 4, &err) == FEATHER_OK);
    REQUIRE(feather_writer_begin(w, &err) == FEATHER_OK);
    CHECK(feather_writer_commit(w, &err) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(err.message, "never filled");
    CHECK(access(p2, F_OK) != 0);
}

/* ---- round trip through the library's reader ---- */

static void roundtrip_case(const char *path, const feather_write_options *o) {
    feather_error err = {0};
    REQUIRE(write_model(path, o, model, NMODEL, model_meta, 777, &err) == FEATHER_OK);
    feather_reader *r;
    REQUIRE(feather_open(&r, path, 0, &err) == FEATHER_OK);
    CHECK_EQ_U(feather_count(r), NMODEL);
    for (size_t i = 0; i < NMODEL; i++) {
        const feather_tensor *t = feather_find(r, model[i].name);
        CHECK(t != NULL);
        if (!t) continue;
        CHECK(t->dtype == model[i].dtype);
        CHECK_EQ_U(t->ndim, model[i].ndim);
        for (unsigned d = 0; d < t->ndim && d < model[i].ndim; d++)
            CHECK_EQ_U(t->shape[d], model[i].shape[d]);
        const void *data;
        CHECK(feather_tensor_data(r, t, &data, &err) == FEATHER_OK); /* checks the hash */
        uint64_t h;
        CHECK(feather_recorded_hash(r, t, &h));
        CHECK_EQ_U(h, XXH3_64bits(data, t->nbytes));
        for (uint64_t k = 0; k < t->nbytes; k++)
            if (((const unsigned char *)data)[k] != tensor_byte(t->name, k)) {
                test_fail(__FILE__, __LINE__, "%s byte %llu", t->name, (unsigned long long)k);
                break;
            }
    }
    for (size_t i = 0; model_meta[i]; i += 2) {
        const char *v = feather_metadata_get(r, 0, model_meta[i]);
        CHECK(v && !strcmp(v, model_meta[i + 1]));
    }
    CHECK(feather_metadata_get(r, 0, FEATHER_HASH_KEY) != NULL);
    feather_close(r);
}

TEST(writer_roundtrip_through_reader) {
    roundtrip_case(test_path("rt.safetensors"), NULL);
    feather_write_options z = {.zstd_level = 3};
    roundtrip_case(test_path("rt.safetensors.zst"), &z);
}

TEST(writer_roundtrip_escaped_names_through_reader) {
    const char *names[] = {"quote\"d", "back\\slash", "ctl\x01\x1f", "nl\n\t",
                           "caf\xc3\xa9", "emoji\xf0\x9f\x98\x80"};
    enum { NN = sizeof names / sizeof names[0] };
    tspec ts[NN];
    for (int i = 0; i < NN; i++) ts[i] = (tspec){names[i], FEATHER_BF16, 1, {(uint64_t)i + 2}};
    const char *path = test_path("rt-esc.safetensors");
    feather_error err = {0};
    REQUIRE(write_model(path, NULL, ts, NN, NULL, 3, &err) == FEATHER_OK);
    feather_reader *r;
    REQUIRE(feather_open(&r, path, 0, &err) == FEATHER_OK);
    for (int i = 0; i < NN; i++) {
        const feather_tensor *t = feather_find(r, names[i]);
        const void *data;
        CHECK(t && feather_tensor_data(r, t, &data, &err) == FEATHER_OK);
    }
    feather_close(r);
}

TEST(writer_hashes_catch_corruption_through_reader) {
    const char *path = test_path("rt-bad.safetensors");
    feather_error err = {0};
    REQUIRE(write_model(path, NULL, model, NMODEL, NULL, 4096, &err) == FEATHER_OK);
    /* Flip the last data byte: it belongs to the last tensor in layout order. */
    int fd = open(path, O_RDWR);
    REQUIRE(fd >= 0);
    off_t end = lseek(fd, 0, SEEK_END);
    unsigned char c;
    CHECK(pread(fd, &c, 1, end - 1) == 1);
    c ^= 1;
    CHECK(pwrite(fd, &c, 1, end - 1) == 1);
    close(fd);
    feather_reader *r;
    REQUIRE(feather_open(&r, path, 0, &err) == FEATHER_OK);
    size_t bad = 0;
    for (size_t i = 0; i < feather_count(r); i++) {
        const void *data;
        if (feather_tensor_data(r, feather_tensor_at(r, i), &data, &err) == FEATHER_E_MISMATCH)
            bad++;
    }
    CHECK_EQ_U(bad, 1);
    feather_close(r);
}

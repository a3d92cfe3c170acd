/* The reader on valid files: real checkpoints, built models, shards, .zst input, recorded
 * hashes, and feather-verify --info. Malformed headers are in test_conformance.c. */
#include "test.h"
#include "st_build.h"
#include "feather/feather.h"
#include "reader_internal.h"

#include <cJSON.h>
#include <dirent.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

static const stb_tensor model_tensors[] = {
    {"blk.0.w", "F16", 2, {2, 4}},
    {"blk.0.b", "BF16", 1, {4}},
    {"scale", "F32", 0, {0}},
    {"empty", "F32", 2, {3, 0}},
    {"packed", "F4", 2, {3, 2}},
    {"ids", "I64", 1, {5}},
};
#define NMODEL (sizeof model_tensors / sizeof *model_tensors)

static const char *write_buf(const char *name, const stb_buf *b) {
    const char *path = test_path(name);
    if (stb_write(path, b->p, b->len)) test_fail(__FILE__, __LINE__, "cannot write %s", path);
    return path;
}

static int one_line(const char *s) { return !strchr(s, '\n') && !strchr(s, '\r'); }

/* Every tensor's bytes in the reader equal the file's bytes at 8 + N + begin. */
static void check_data_matches(feather_reader *r, const uint8_t *file, size_t file_len) {
    uint64_t n = feather_shard_header_len(r, 0), covered = 0;
    for (size_t i = 0; i < feather_count(r); i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        const void *p = NULL;
        feather_error e = {0};
        REQUIRE(feather_tensor_data(r, t, &p, &e) == FEATHER_OK);
        CHECK_EQ_U(t->nbytes, t->end - t->begin);
        CHECK_EQ_U(t->nbytes * 8, t->nelem * feather_dtype_bits(t->dtype));
        CHECK_EQ_U(t->begin, covered);
        REQUIRE(8 + n + t->end <= file_len);
        CHECK(t->nbytes == 0 || memcmp(p, file + 8 + n + t->begin, t->nbytes) == 0);
        CHECK(feather_find(r, t->name) == t);
        covered = t->end;
    }
    CHECK_EQ_U(8 + n + covered, file_len);
}

/* ---- real checkpoints ---- */

static const struct { const char *file; size_t ntensors; } real_ok[] = {
    {"leighwoods_flux_lora_f16.safetensors", 8},  {"vfph55_sd15_lora_bf16.safetensors", 256},
    {"bk7195_pythia_lora_f16.safetensors", 48},   {"branbot6_lora_f32.safetensors", 66},
    {"tl_reverse_model_f32.safetensors", 38},     {"mlx_adapters_f32.safetensors", 16},
    {"elyas_mnist_mlp_f32.safetensors", 2},       {"bumblebee_site_f32.safetensors", 46},
    {"syoyo_gen_model_f64.safetensors", 2},
};

static int real_path(char *buf, size_t len, const char *file) {
    snprintf(buf, len, "%s/%s", test_real_dir(), file);
    if (access(buf, R_OK) == 0) return 0;
    char why[600];
    snprintf(why, sizeof why, "real test data missing: %s (set FEATHER_TESTDATA)", buf);
    test_skip(why);
    return -1;
}

TEST(reader_real_files_read_fully) {
    for (size_t k = 0; k < sizeof real_ok / sizeof *real_ok; k++) {
        char path[512];
        if (real_path(path, sizeof path, real_ok[k].file)) return;
        size_t len;
        uint8_t *file = stb_read(path, &len);
        REQUIRE(file);
        feather_reader *r = NULL, *h = NULL;
        feather_error e = {0};
        if (feather_open(&r, path, 0, &e)) {
            test_fail(__FILE__, __LINE__, "%s", e.message);
            free(file);
            continue;
        }
        CHECK_EQ_U(feather_count(r), real_ok[k].ntensors);
        CHECK_EQ_U(feather_shard_count(r), 1);
        CHECK_EQ_U(feather_shard_file_size(r, 0), len);
        check_data_matches(r, file, len);
        /* Header-only lists the same tensors. */
        REQUIRE(feather_open(&h, path, FEATHER_OPEN_HEADER_ONLY, &e) == FEATHER_OK);
        CHECK_EQ_U(feather_count(h), feather_count(r));
        for (size_t i = 0; i < feather_count(r) && i < feather_count(h); i++) {
            const feather_tensor *a = feather_tensor_at(r, i), *b = feather_tensor_at(h, i);
            CHECK(!strcmp(a->name, b->name) && a->begin == b->begin && a->end == b->end &&
                  a->dtype == b->dtype && a->ndim == b->ndim);
        }
        feather_close(h);
        feather_close(r);
        free(file);
    }
}

TEST(reader_real_metadata) {
    char path[512];
    if (real_path(path, sizeof path, "vfph55_sd15_lora_bf16.safetensors")) return;
    feather_reader *r = NULL;
    feather_error e = {0};
    REQUIRE(feather_open(&r, path, FEATHER_OPEN_HEADER_ONLY, &e) == FEATHER_OK);
    const char *fmt = feather_metadata_get(r, 0, "format");
    CHECK(fmt && !strcmp(fmt, "pt"));
    CHECK(feather_dtype_name(feather_tensor_at(r, 0)->dtype)[0] == 'B'); /* BF16 */
    feather_close(r);
    /* MLX writes "__metadata__": null. */
    if (real_path(path, sizeof path, "mlx_adapters_f32.safetensors")) return;
    REQUIRE(feather_open(&r, path, FEATHER_OPEN_HEADER_ONLY, &e) == FEATHER_OK);
    CHECK_EQ_U(feather_metadata_count(r, 0), 0);
    CHECK_EQ_U(feather_shard_header_len(r, 0) % 8, 4); /* unaligned data start still maps */
    feather_close(r);
}

TEST(reader_real_files_broken) {
    static const struct { const char *file, *why; } bad[] = {
        {"srikanth_truncated_sdxl_lora.safetensors", "data is truncated"},
        {"wubu_fixture_bad.safetensors", "6 bytes after the end of the last tensor's data"},
    };
    for (size_t k = 0; k < 2; k++) {
        char path[512];
        if (real_path(path, sizeof path, bad[k].file)) return;
        for (unsigned f = 0; f <= FEATHER_OPEN_HEADER_ONLY; f += FEATHER_OPEN_HEADER_ONLY) {
            feather_reader *r = NULL;
            feather_error e = {0};
            CHECK(feather_open(&r, path, f, &e) == FEATHER_E_INVALID);
            CHECK(r == NULL);
            CHECK_STR_CONTAINS(e.message, bad[k].why);
            CHECK_STR_CONTAINS(e.message, path);
            CHECK(one_line(e.message));
        }
    }
}

/* ---- built models ---- */

TEST(reader_model_layout_and_data) {
    stb_buf b = stb_model(model_tensors, NMODEL, "\"b\":\"2\",\"a\":\"1\"", 0, 1);
    stb_corpus("model", &b);
    const char *path = write_buf("m.safetensors", &b);
    feather_reader *r = NULL;
    feather_error e = {0};
    REQUIRE(feather_open(&r, path, 0, &e) == FEATHER_OK);
    REQUIRE(feather_count(r) == NMODEL);
    CHECK(!strcmp(feather_reader_path(r), path));
    CHECK(!strcmp(feather_shard_path(r, 0), path));
    CHECK(feather_shard_path(r, 1) == NULL);
    for (size_t i = 0; i < NMODEL; i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        /* Zero-sized tensors share an offset with the next one; header order breaks the tie. */
        CHECK(!strcmp(t->name, model_tensors[i].name));
        CHECK_EQ_U(t->ndim, model_tensors[i].ndim);
        for (unsigned d = 0; d < t->ndim; d++) CHECK_EQ_U(t->shape[d], model_tensors[i].shape[d]);
        CHECK_EQ_U(t->shard, 0);
    }
    CHECK_EQ_U(feather_find(r, "scale")->nelem, 1);
    CHECK_EQ_U(feather_find(r, "empty")->nbytes, 0);
    CHECK_EQ_U(feather_find(r, "packed")->nbytes, 3);
    CHECK(feather_find(r, "nope") == NULL);
    CHECK(feather_find(r, NULL) == NULL);
    CHECK(feather_tensor_at(r, NMODEL) == NULL);
    /* Metadata keeps file order. */
    REQUIRE(feather_metadata_count(r, 0) == 2);
    CHECK(!strcmp(feather_metadata_key(r, 0, 0), "b"));
    CHECK(!strcmp(feather_metadata_value(r, 0, 1), "1"));
    CHECK(feather_metadata_key(r, 0, 2) == NULL);
    CHECK(feather_metadata_get(r, 0, "c") == NULL);
    CHECK(feather_metadata_count(r, 1) == 0);
    check_data_matches(r, b.p, b.len);
    uint64_t h;
    CHECK(feather_recorded_hash(r, feather_tensor_at(r, 0), &h) == 0);
    feather_close(r);
    stb_free(&b);
}

TEST(reader_data_pointer_is_zero_copy_and_aligned) {
    stb_buf b = stb_model(model_tensors, NMODEL, NULL, 0, 2);
    feather_reader *r = NULL;
    feather_error e = {0};
    REQUIRE(st_open_memory(&r, b.p, b.len, "mem", 0, &e) == FEATHER_OK);
    const feather_tensor *t = feather_find(r, "ids");
    const void *p;
    REQUIRE(t && feather_tensor_data(r, t, &p, &e) == FEATHER_OK);
    CHECK((const uint8_t *)p == b.p + 8 + feather_shard_header_len(r, 0) + t->begin);
    feather_close(r);
    stb_free(&b);
}

TEST(reader_api_misuse) {
    stb_buf b = stb_model(model_tensors, NMODEL, NULL, 0, 3);
    const char *path = write_buf("m.safetensors", &b);
    feather_reader *r = NULL, *h = NULL;
    feather_error e = {0};
    REQUIRE(feather_open(&r, path, 0, &e) == FEATHER_OK);
    REQUIRE(feather_open(&h, path, FEATHER_OPEN_HEADER_ONLY, &e) == FEATHER_OK);
    const void *p = NULL;
    CHECK(feather_tensor_data(h, feather_tensor_at(h, 0), &p, &e) == FEATHER_E_ARG);
    CHECK_STR_CONTAINS(e.message, "header-only");
    /* A tensor of another reader, or a copy, is refused. */
    CHECK(feather_tensor_data(r, feather_tensor_at(h, 0), &p, &e) == FEATHER_E_ARG);
    feather_tensor copy = *feather_tensor_at(r, 0);
    CHECK(feather_tensor_data(r, &copy, &p, &e) == FEATHER_E_ARG);
    CHECK(feather_tensor_data(r, NULL, &p, &e) == FEATHER_E_ARG);
    CHECK(feather_open(NULL, path, 0, &e) == FEATHER_E_ARG);
    feather_reader *none = NULL;
    CHECK(feather_open(&none, test_path("missing.safetensors"), 0, &e) == FEATHER_E_IO);
    CHECK(none == NULL);
    CHECK_STR_CONTAINS(e.message, "missing.safetensors");
    feather_close(h);
    feather_close(NULL);
    feather_close(r);
    stb_free(&b);
}

/* A checkpoint in another format is named as such, in one line, rather than as a safetensors
 * file with an impossible header length. */
TEST(reader_other_formats_are_named) {
    static const struct { const char *name; const char *magic; size_t n; const char *says; } f[] = {
        {"torch.ckpt", "PK\x03\x04\x14\x00\x00\x00", 8, "PyTorch"},
        {"old.bin", "\x80\x02}q\x00(X\x0e", 8, "pickle"},
        {"m.gguf", "GGUF\x03\x00\x00\x00", 8, "GGUF"},
        {"m.safetensors", "\x28\xb5\x2f\xfd\x24\x00\x01\x00", 8, ".safetensors.zst"},
        {"m.safetensors.gz", "\x1f\x8b\x08\x00\x00\x00\x00\x00", 8, "gzip"},
        {"m.h5", "\x89HDF\r\n\x1a\n", 8, "HDF5"},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        uint8_t bytes[4096] = {0};
        memcpy(bytes, f[i].magic, f[i].n);
        for (size_t j = f[i].n; j < sizeof bytes; j++) bytes[j] = (uint8_t)(j * 131 + 7);
        stb_buf b = {bytes, sizeof bytes};
        const char *path = write_buf(f[i].name, &b);
        feather_reader *r = NULL;
        feather_error e = {0};
        CHECK(feather_open(&r, path, 0, &e) == FEATHER_E_INVALID);
        CHECK(r == NULL);
        CHECK_STR_CONTAINS(e.message, "not a safetensors file");
        CHECK_STR_CONTAINS(e.message, f[i].says);
        CHECK_STR_CONTAINS(e.message, f[i].name);
        CHECK(one_line(e.message));
    }
}

/* Dropping and prefetching pages never changes what a tensor reads; the header bytes are the
 * file's first 8 + N bytes in every mode. */
TEST(reader_paging_hints_and_header_bytes) {
    stb_buf b = stb_model(model_tensors, NMODEL, NULL, 1, 15);
    const char *path = write_buf("p.safetensors", &b);
    for (unsigned f = 0; f <= FEATHER_OPEN_HEADER_ONLY; f += FEATHER_OPEN_HEADER_ONLY) {
        feather_reader *r = NULL;
        feather_error e = {0};
        REQUIRE(feather_open(&r, path, f, &e) == FEATHER_OK);
        const uint8_t *hb = feather_shard_header_bytes(r, 0);
        REQUIRE(hb);
        CHECK(!memcmp(hb, b.p, 8 + feather_shard_header_len(r, 0)));
        CHECK(feather_shard_header_bytes(r, 1) == NULL);
        for (size_t i = 0; i < feather_count(r); i++) {
            const feather_tensor *t = feather_tensor_at(r, i);
            feather_tensor_prefetch(r, t);
            feather_tensor_release(r, t);
        }
        feather_tensor_release(r, NULL);
        if (!f) check_data_matches(r, b.p, b.len);
        feather_close(r);
    }
    stb_free(&b);
}

/* Releases gathered into runs (feather_tensor_release gives pages back 8 MiB at a time, or when
 * a release falls outside the run): tensors released from two threads at once, in an order that
 * jumps about, still read what the file holds, after and between the releases. */
typedef struct release_arg {
    feather_reader *r;
    int odd;
} release_arg;

static void *release_half(void *p) {
    const release_arg *a = p;
    const size_t n = feather_count(a->r);
    for (size_t i = (size_t)a->odd; i < n; i += 2) {
        const size_t j = i * 7 % n; /* 7 and n coprime: each tensor once */
        const void *d;
        if (feather_tensor_data(a->r, feather_tensor_at(a->r, j), &d, NULL) == FEATHER_OK)
            feather_tensor_release(a->r, feather_tensor_at(a->r, j));
    }
    return NULL;
}

TEST(reader_releases_in_runs_from_two_threads) {
    enum { NT = 48 };
    static char names[NT][24];
    stb_tensor ts[NT];
    for (int i = 0; i < NT; i++) {
        snprintf(names[i], sizeof names[i], "t%02d.weight", i);
        /* 40 KiB to about 1 MiB each, 24 MiB in all: runs fill and flush */
        ts[i] = (stb_tensor){names[i], "U8", 1, {(uint64_t)(40960 + (i * 104729) % 1000000)}};
    }
    stb_buf b = stb_model(ts, NT, NULL, 1, 23);
    const char *path = write_buf("runs.safetensors", &b);
    feather_reader *r = NULL;
    feather_error e = {0};
    REQUIRE(feather_open(&r, path, 0, &e) == FEATHER_OK);
    for (int round = 0; round < 2; round++) {
        pthread_t th;
        release_arg a0 = {r, 0}, a1 = {r, 1};
        REQUIRE(pthread_create(&th, NULL, release_half, &a1) == 0);
        release_half(&a0);
        pthread_join(th, NULL);
        check_data_matches(r, b.p, b.len);
    }
    feather_close(r);
    stb_free(&b);
}

/* The index of a JSON object's members finds what cJSON's own lookup finds: the first member
 * of a name (duplicates included), nothing for a name that is not there. */
TEST(json_index_finds_members_as_cjson_does) {
    cJSON *o = cJSON_CreateObject();
    uint64_t s = 7;
    char name[32];
    for (int i = 0; i < 300; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        snprintf(name, sizeof name, "m%llu", (unsigned long long)(s >> 40) % 200); /* repeats */
        cJSON_AddItemToObject(o, name, cJSON_CreateNumber(i));
    }
    feather_json_index ix;
    REQUIRE(feather_json_index_init(&ix, o) == 0);
    CHECK_EQ_U(ix.n, 300);
    int found = 0;
    for (int i = 0; i < 220; i++) {
        snprintf(name, sizeof name, "m%d", i);
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(o, name);
        CHECK(feather_json_index_get(&ix, name) == want);
        found += want != NULL;
    }
    CHECK(found > 100 && found < 200);
    CHECK(feather_json_index_get(&ix, "") == NULL && feather_json_index_get(&ix, NULL) == NULL);
    feather_json_index_free(&ix);
    cJSON *arr = cJSON_CreateArray();
    cJSON_AddItemToArray(arr, cJSON_CreateNumber(1));
    REQUIRE(feather_json_index_init(&ix, arr) == 0);
    CHECK(ix.n == 0 && feather_json_index_get(&ix, "m1") == NULL);
    feather_json_index_free(&ix);
    REQUIRE(feather_json_index_init(&ix, NULL) == 0);
    CHECK(ix.n == 0);
    feather_json_index_free(&ix);
    cJSON_Delete(arr);
    cJSON_Delete(o);
}

/* ---- recorded hashes ---- */

TEST(reader_hash_check_passes) {
    stb_buf b = stb_model(model_tensors, NMODEL, "\"k\":\"v\"", 1, 4);
    stb_corpus("model_with_hashes", &b);
    const char *path = write_buf("h.safetensors", &b);
    feather_reader *r = NULL;
    feather_error e = {0};
    REQUIRE(feather_open(&r, path, 0, &e) == FEATHER_OK);
    CHECK(feather_metadata_get(r, 0, FEATHER_HASH_KEY) != NULL);
    for (size_t i = 0; i < feather_count(r); i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        const void *p;
        uint64_t h = 0;
        CHECK(feather_tensor_data(r, t, &p, &e) == FEATHER_OK);
        CHECK(feather_tensor_data(r, t, &p, &e) == FEATHER_OK);
        CHECK(feather_recorded_hash(r, t, &h) == 1);
        CHECK(h == feather_hash(p, t->nbytes));
    }
    feather_close(r);
    stb_free(&b);
}

TEST(reader_hash_mismatch_names_tensor) {
    stb_buf b = stb_model(model_tensors, NMODEL, NULL, 1, 5);
    feather_reader *r = NULL;
    feather_error e = {0};
    /* Find where "ids" lies, flip one of its bytes. */
    REQUIRE(st_open_memory(&r, b.p, b.len, "x", FEATHER_OPEN_NO_HASH_CHECK, &e) == FEATHER_OK);
    const feather_tensor *t = feather_find(r, "ids");
    size_t at = 8 + feather_shard_header_len(r, 0) + t->begin + 3;
    feather_close(r);
    b.p[at] ^= 0x40;
    const char *path = write_buf("flipped.safetensors", &b);
    REQUIRE(feather_open(&r, path, 0, &e) == FEATHER_OK); /* hashes are checked on access */
    const void *p;
    CHECK(feather_tensor_data(r, feather_find(r, "blk.0.w"), &p, &e) == FEATHER_OK);
    for (int again = 0; again < 2; again++) {
        CHECK(feather_tensor_data(r, feather_find(r, "ids"), &p, &e) == FEATHER_E_MISMATCH);
        CHECK_STR_CONTAINS(e.message, path);
        CHECK_STR_CONTAINS(e.message, "tensor 'ids': XXH3 mismatch (recorded ");
        CHECK(one_line(e.message));
    }
    uint64_t rec;
    char want[64];
    REQUIRE(feather_recorded_hash(r, feather_find(r, "ids"), &rec));
    snprintf(want, sizeof want, "recorded %016llx, computed ", (unsigned long long)rec);
    CHECK_STR_CONTAINS(e.message, want);
    feather_close(r);
    /* The check can be turned off. */
    REQUIRE(feather_open(&r, path, FEATHER_OPEN_NO_HASH_CHECK, &e) == FEATHER_OK);
    CHECK(feather_tensor_data(r, feather_find(r, "ids"), &p, &e) == FEATHER_OK);
    feather_close(r);
    stb_free(&b);
}

typedef struct hash_job {
    feather_reader *r;
    int failures;
} hash_job;

static void *access_all(void *arg) {
    hash_job *j = arg;
    for (int round = 0; round < 20; round++) {
        for (size_t i = 0; i < feather_count(j->r); i++) {
            const void *p;
            if (feather_tensor_data(j->r, feather_tensor_at(j->r, i), &p, NULL)) j->failures++;
        }
    }
    return NULL;
}

TEST(reader_hash_check_concurrent) {
    stb_buf b = stb_model(model_tensors, NMODEL, NULL, 1, 6);
    feather_reader *r = NULL;
    feather_error e = {0};
    REQUIRE(st_open_memory(&r, b.p, b.len, "x", 0, &e) == FEATHER_OK);
    pthread_t th[4];
    hash_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (hash_job){r, 0};
        REQUIRE(pthread_create(&th[i], NULL, access_all, &jobs[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_U(jobs[i].failures, 0);
    }
    feather_close(r);
    stb_free(&b);
}

/* ---- .zst input ---- */

/* Compressed with a content checksum, as a writer should, so corruption is detectable. */
static size_t zst_frame(uint8_t *dst, size_t cap, const uint8_t *src, size_t len) {
    ZSTD_CCtx *c = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, 3);
    ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1);
    size_t n = ZSTD_compress2(c, dst, cap, src, len);
    ZSTD_freeCCtx(c);
    return n;
}

static stb_buf zst_compress(const stb_buf *in, int frames) {
    size_t cap = ZSTD_compressBound(in->len) * 2 + 64;
    stb_buf z = {malloc(cap), 0};
    if (!z.p) return z;
    size_t half = frames > 1 ? in->len / 2 : in->len;
    size_t n = zst_frame(z.p, cap, in->p, half);
    if (frames > 1 && !ZSTD_isError(n)) {
        size_t m = zst_frame(z.p + n, cap - n, in->p + half, in->len - half);
        n = ZSTD_isError(m) ? m : n + m;
    }
    z.len = ZSTD_isError(n) ? 0 : n;
    return z;
}

/* A model large enough that decompression takes several buffer refills. */
static stb_buf big_model(unsigned seed) {
    static const stb_tensor t[] = {
        {"w1", "F32", 2, {256, 300}}, {"w2", "BF16", 2, {512, 333}}, {"b", "F16", 1, {77}}};
    return stb_model(t, 3, "\"note\":\"zst\"", 1, seed);
}

TEST(reader_zst_roundtrip) {
    stb_buf b = big_model(7);
    for (int frames = 1; frames <= 2; frames++) {
        stb_buf z = zst_compress(&b, frames);
        REQUIRE(z.len > 0);
        const char *path = write_buf("z.safetensors.zst", &z);
        feather_reader *r = NULL;
        feather_error e = {0};
        REQUIRE(feather_open(&r, path, 0, &e) == FEATHER_OK);
        CHECK_EQ_U(feather_shard_file_size(r, 0), b.len);
        CHECK_EQ_U(feather_count(r), 3);
        check_data_matches(r, b.p, b.len); /* also checks every recorded hash */
        feather_close(r);
        REQUIRE(feather_open(&r, path, FEATHER_OPEN_HEADER_ONLY, &e) == FEATHER_OK);
        CHECK_EQ_U(feather_shard_file_size(r, 0), b.len);
        CHECK_EQ_U(feather_count(r), 3);
        CHECK(!memcmp(feather_shard_header_bytes(r, 0), b.p, 8 + feather_shard_header_len(r, 0)));
        feather_close(r);
        stb_free(&z);
    }
    stb_free(&b);
}

static void expect_zst_error(const stb_buf *z, const char *name, const char *msg) {
    const char *path = write_buf(name, z);
    for (unsigned f = 0; f <= FEATHER_OPEN_HEADER_ONLY; f += FEATHER_OPEN_HEADER_ONLY) {
        feather_reader *r = NULL;
        feather_error e = {0};
        CHECK(feather_open(&r, path, f, &e) == FEATHER_E_INVALID);
        CHECK(r == NULL);
        CHECK_STR_CONTAINS(e.message, path);
        CHECK_STR_CONTAINS(e.message, msg);
        CHECK(one_line(e.message));
    }
}

TEST(reader_zst_corrupt) {
    stb_buf b = big_model(8);
    stb_buf z = zst_compress(&b, 1);
    REQUIRE(z.len > 100);
    stb_buf t = {z.p, z.len - 7};
    expect_zst_error(&t, "truncated.safetensors.zst", "zstd stream is truncated");
    stb_buf empty = {z.p, 0};
    expect_zst_error(&empty, "empty.safetensors.zst", "empty file, not a zstd stream");
    expect_zst_error(&b, "plain.safetensors.zst", "not a valid zstd stream");
    for (size_t i = z.len / 3; i < z.len / 3 + 40; i++) z.p[i] ^= 0xa5;
    expect_zst_error(&z, "corrupt.safetensors.zst", "not a valid zstd stream");
    z.p[0] ^= 1; /* magic number */
    expect_zst_error(&z, "magic.safetensors.zst", "not a valid zstd stream");
    stb_free(&z);
    /* A valid stream of an invalid file: the header rules apply to the decompressed bytes. */
    b.p[b.len - 1] ^= 1;
    stb_buf longer = stb_raw(0, NULL, 0, 0);
    longer.p = realloc(longer.p, b.len + 3);
    memcpy(longer.p, b.p, b.len);
    memset(longer.p + b.len, 0, 3);
    longer.len = b.len + 3;
    z = zst_compress(&longer, 1);
    expect_zst_error(&z, "trailing.safetensors.zst", "3 bytes after the end of the last tensor's data");
    stb_free(&z);
    longer.len = b.len - 5;
    z = zst_compress(&longer, 1);
    expect_zst_error(&z, "short.safetensors.zst", "data is truncated");
    stb_free(&z);
    /* A bad header stops decompression before the data. */
    static const char dup[] = "{\"__metadata__\":{},\"__metadata__\":{}}";
    stb_buf d = stb_file(dup, sizeof dup - 1, 1 << 20);
    z = zst_compress(&d, 1);
    expect_zst_error(&z, "dup.safetensors.zst", "key '__metadata__' appears twice");
    stb_free(&z);
    stb_free(&d);
    stb_buf big = stb_raw(FEATHER_MAX_HEADER + 1, "{}", 2, 100);
    z = zst_compress(&big, 1);
    expect_zst_error(&z, "limit.safetensors.zst", "exceeds the limit");
    stb_free(&z);
    stb_free(&big);
    stb_free(&longer);
    stb_free(&b);
}

TEST(reader_zst_temp_dir_error) {
    stb_buf b = big_model(9);
    stb_buf z = zst_compress(&b, 1);
    const char *path = write_buf("t.safetensors.zst", &z);
    const char *old = getenv("TMPDIR");
    char *saved = old ? strdup(old) : NULL;
    setenv("TMPDIR", test_path("no-such-dir"), 1);
    feather_reader *r = NULL;
    feather_error e = {0};
    CHECK(feather_open(&r, path, 0, &e) == FEATHER_E_IO);
    CHECK_STR_CONTAINS(e.message, "cannot create a temporary file in");
    /* Header-only needs no temporary file. */
    CHECK(feather_open(&r, path, FEATHER_OPEN_HEADER_ONLY, &e) == FEATHER_OK);
    feather_close(r);
    if (saved) setenv("TMPDIR", saved, 1);
    else unsetenv("TMPDIR");
    free(saved);
    stb_free(&z);
    stb_free(&b);
}

/* ---- shards ---- */

static const stb_tensor shard1[] = {{"a", "F32", 1, {3}}, {"b", "F16", 2, {2, 2}}};
static const stb_tensor shard2[] = {{"c", "U8", 1, {5}}, {"d", "I32", 0, {0}}};

static char shard_dir[600];

/* dir/model-0000{1,2}-of-00002.safetensors */
static void make_shards(const char *dir) {
    snprintf(shard_dir, sizeof shard_dir, "%s", dir);
    mkdir(dir, 0755);
    char p[700];
    stb_buf s1 = stb_model(shard1, 2, NULL, 1, 10), s2 = stb_model(shard2, 2, NULL, 0, 11);
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    CHECK(stb_write(p, s1.p, s1.len) == 0);
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    CHECK(stb_write(p, s2.p, s2.len) == 0);
    stb_free(&s1);
    stb_free(&s2);
}

static const char *write_index(const char *name, const char *json) {
    static char p[700];
    snprintf(p, sizeof p, "%s/%s", shard_dir, name);
    CHECK(stb_write(p, json, strlen(json)) == 0);
    return p;
}

#define S1 "\"model-00001-of-00002.safetensors\""
#define S2 "\"model-00002-of-00002.safetensors\""
#define GOOD_MAP "\"a\":" S1 ",\"c\":" S2 ",\"b\":" S1 ",\"d\":" S2

static void check_sharded(feather_reader *r) {
    REQUIRE(feather_count(r) == 4);
    REQUIRE(feather_shard_count(r) == 2);
    CHECK_STR_CONTAINS(feather_shard_path(r, 0), "model-00001-of-00002.safetensors");
    CHECK_STR_CONTAINS(feather_shard_path(r, 1), "model-00002-of-00002.safetensors");
    static const char *order[] = {"a", "b", "c", "d"};
    for (size_t i = 0; i < 4; i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        CHECK(!strcmp(t->name, order[i]));
        CHECK_EQ_U(t->shard, i / 2);
        CHECK(feather_find(r, order[i]) == t);
    }
    CHECK(feather_shard_header_len(r, 1) > 0);
    const void *p;
    feather_error e = {0};
    if (feather_shard_count(r) == 2 && feather_shard_file_size(r, 1) > 0) {
        for (size_t i = 0; i < 4; i++) {
            const feather_tensor *t = feather_tensor_at(r, i);
            size_t len;
            uint8_t *file = stb_read(feather_shard_path(r, t->shard), &len);
            REQUIRE(file);
            if (!feather_tensor_data(r, t, &p, &e))
                CHECK(!memcmp(p, file + 8 + feather_shard_header_len(r, t->shard) + t->begin, t->nbytes));
            else
                CHECK_STR_CONTAINS(e.message, "header-only");
            free(file);
        }
    }
}

TEST(reader_sharded_index_and_directory) {
    const char *dir = test_path("sharded");
    make_shards(dir);
    const char *ix = write_index("model.safetensors.index.json",
                                 "{\"metadata\":{\"total_size\":46},\"weight_map\":{" GOOD_MAP "}}");
    for (unsigned f = 0; f <= FEATHER_OPEN_HEADER_ONLY; f += FEATHER_OPEN_HEADER_ONLY) {
        feather_reader *r = NULL;
        feather_error e = {0};
        REQUIRE(feather_open(&r, ix, f, &e) == FEATHER_OK);
        CHECK(!strcmp(feather_reader_path(r), ix));
        check_sharded(r);
        feather_close(r);
        REQUIRE(feather_open(&r, dir, f, &e) == FEATHER_OK);
        CHECK(!strcmp(feather_reader_path(r), dir));
        check_sharded(r);
        feather_close(r);
    }
}

static void expect_index_error(const char *json, feather_status want, const char *msg) {
    const char *ix = write_index("bad.safetensors.index.json", json);
    feather_reader *r = NULL;
    feather_error e = {0};
    feather_status st = feather_open(&r, ix, FEATHER_OPEN_HEADER_ONLY, &e);
    if (st != want) test_fail(__FILE__, __LINE__, "status %d for %s: %s", st, json, e.message);
    CHECK(r == NULL);
    CHECK_STR_CONTAINS(e.message, msg);
    CHECK(one_line(e.message));
}

TEST(reader_sharded_index_errors) {
    make_shards(test_path("sh"));
    /* A third shard holding a tensor that the first one has too. */
    static const stb_tensor dup[] = {{"x", "U8", 1, {1}}, {"a", "F32", 1, {3}}};
    stb_buf s3 = stb_model(dup, 2, NULL, 0, 12);
    char p[700];
    snprintf(p, sizeof p, "%s/extra.safetensors", shard_dir);
    REQUIRE(stb_write(p, s3.p, s3.len) == 0);
    stb_free(&s3);
    snprintf(p, sizeof p, "%s/broken.safetensors", shard_dir);
    REQUIRE(stb_write(p, "\x01\0\0\0\0\0\0\0{", 9) == 0);

    expect_index_error("{\"weight_map\":{" GOOD_MAP ",\"e\":" S1 "}}", FEATHER_E_INVALID,
                       "weight_map puts tensor 'e' in ");
    expect_index_error("{\"weight_map\":{\"a\":" S2 ",\"b\":" S1 ",\"c\":" S2 ",\"d\":" S2 "}}",
                       FEATHER_E_INVALID, "but it is in");
    expect_index_error("{\"weight_map\":{\"a\":" S1 ",\"b\":" S1 ",\"c\":" S2 "}}",
                       FEATHER_E_INVALID, "tensor 'd' of ");
    expect_index_error("{\"weight_map\":{\"a\":" S1 ",\"b\":" S1 ",\"x\":\"extra.safetensors\"}}",
                       FEATHER_E_INVALID, "tensor 'a' is in two shards");
    expect_index_error("{\"weight_map\":{\"a\":\"/etc/model.safetensors\"}}", FEATHER_E_INVALID,
                       "is absolute");
    expect_index_error("{\"weight_map\":{\"a\":\"../model.safetensors\"}}", FEATHER_E_INVALID,
                       "leaves the index's directory");
    expect_index_error("{\"weight_map\":{\"a\":\"sub/../../m.safetensors\"}}", FEATHER_E_INVALID,
                       "leaves the index's directory");
    expect_index_error("{\"weight_map\":{\"a\":\"\"}}", FEATHER_E_INVALID, "is empty");
    expect_index_error("{\"metadata\":{}}", FEATHER_E_INVALID, "no \"weight_map\" object");
    expect_index_error("{\"weight_map\":[]}", FEATHER_E_INVALID, "no \"weight_map\" object");
    expect_index_error("{\"weight_map\":{}}", FEATHER_E_INVALID, "weight_map is empty");
    expect_index_error("{\"weight_map\":{\"a\":1}}", FEATHER_E_INVALID, "is not a string");
    expect_index_error("{\"weight_map\":{" GOOD_MAP ",\"a\":" S1 "}}", FEATHER_E_INVALID,
                       "weight_map: tensor 'a' appears twice");
    expect_index_error("{\"weight_map\":{" GOOD_MAP "},\"weight_map\":{}}", FEATHER_E_INVALID,
                       "key 'weight_map' appears twice");
    expect_index_error("{\"weight_map\":{" GOOD_MAP "", FEATHER_E_INVALID, "index is not valid JSON");
    expect_index_error("{\"weight_map\":{\"a\\u0000\":" S1 "}}", FEATHER_E_INVALID, "\\u0000");
    /* a shard's own errors name the index that named it first */
    expect_index_error("{\"weight_map\":{\"a\":\"gone.safetensors\"}}", FEATHER_E_IO,
                       "bad.safetensors.index.json: ");
    expect_index_error("{\"weight_map\":{\"a\":\"gone.safetensors\"}}", FEATHER_E_IO,
                       "/gone.safetensors: No such file");
    expect_index_error("{\"weight_map\":{\"a\":\"broken.safetensors\"}}", FEATHER_E_INVALID,
                       "bad.safetensors.index.json: ");
    expect_index_error("{\"weight_map\":{\"a\":\"broken.safetensors\"}}", FEATHER_E_INVALID,
                       "broken.safetensors: header is not valid JSON");
}

TEST(reader_directory_choices) {
    feather_reader *r = NULL;
    feather_error e = {0};
    const char *dir = test_path("d");
    mkdir(dir, 0755);
    CHECK(feather_open(&r, dir, 0, &e) == FEATHER_E_INVALID);
    CHECK_STR_CONTAINS(e.message, "no .safetensors file and no *.safetensors.index.json");
    /* One file: that is the model. */
    stb_buf b = stb_model(model_tensors, NMODEL, NULL, 0, 13);
    char p[700];
    snprintf(p, sizeof p, "%s/one.safetensors", dir);
    REQUIRE(stb_write(p, b.p, b.len) == 0);
    REQUIRE(feather_open(&r, dir, 0, &e) == FEATHER_OK);
    CHECK(!strcmp(feather_shard_path(r, 0), p));
    CHECK(!strcmp(feather_reader_path(r), dir));
    CHECK_EQ_U(feather_count(r), NMODEL);
    feather_close(r);
    /* Two files and no index: ambiguous. */
    snprintf(p, sizeof p, "%s/two.safetensors", dir);
    REQUIRE(stb_write(p, b.p, b.len) == 0);
    CHECK(feather_open(&r, dir, 0, &e) == FEATHER_E_INVALID);
    CHECK_STR_CONTAINS(e.message, "2 .safetensors files (one.safetensors, two.safetensors)");
    CHECK(one_line(e.message));
    /* Two indexes: ambiguous too. */
    snprintf(p, sizeof p, "%s/a.safetensors.index.json", dir);
    REQUIRE(stb_write(p, "{}", 2) == 0);
    snprintf(p, sizeof p, "%s/b.safetensors.index.json", dir);
    REQUIRE(stb_write(p, "{}", 2) == 0);
    CHECK(feather_open(&r, dir, 0, &e) == FEATHER_E_INVALID);
    CHECK_STR_CONTAINS(e.message, "2 *.safetensors.index.json files");
    /* A diffusers pipeline: its models are in folders of their own, which the message names. */
    const char *pipe = test_path("pipe");
    mkdir(pipe, 0755);
    snprintf(p, sizeof p, "%s/model_index.json", pipe);
    REQUIRE(stb_write(p, "{}", 2) == 0);
    CHECK(feather_open(&r, pipe, 0, &e) == FEATHER_E_INVALID);
    CHECK_STR_CONTAINS(e.message, "a diffusers pipeline (model_index.json)");
    snprintf(p, sizeof p, "%s/transformer", pipe);
    mkdir(p, 0755);
    CHECK(feather_open(&r, pipe, 0, &e) == FEATHER_E_INVALID);
    CHECK_STR_CONTAINS(e.message, p);
    CHECK(one_line(e.message));
    stb_free(&b);
}

/* ---- feather-verify --info ---- */

static int count_lines(const char *path) {
    size_t len;
    uint8_t *p = stb_read(path, &len);
    int n = 0;
    for (size_t i = 0; p && i < len; i++) n += p[i] == '\n';
    free(p);
    return n;
}

TEST(reader_verify_info) {
    char meta[600];
    snprintf(meta, sizeof meta, "\"multi\":\"line\\nvalue\",\"long\":\"%0300d\"", 0);
    stb_buf b = stb_model(model_tensors, NMODEL, meta, 1, 14);
    const char *good = write_buf("good.safetensors", &b);
    static const char bad_hdr[] = "{\"t\":{\"dtype\":\"F16\",\"shape\":[2,4],\"data_offsets\":[0,12]}}";
    stb_buf bad = stb_file(bad_hdr, sizeof bad_hdr - 1, 12);
    const char *badp = write_buf("bad.safetensors", &bad);
    const char *errf = test_path("stderr.txt");
    const char *bin = test_bindir();

    CHECK_EQ_U(test_run("%s/feather-verify --info '%s' 2>'%s'", bin, good, errf), 0);
    const char *out = test_cmd_output();
    CHECK_STR_CONTAINS(out, good);
    CHECK_STR_CONTAINS(out, "blk.0.w");
    CHECK_STR_CONTAINS(out, "F16");
    CHECK_STR_CONTAINS(out, "[2, 4]");
    CHECK_STR_CONTAINS(out, "packed");
    CHECK_STR_CONTAINS(out, "line\\nvalue");
    CHECK_STR_CONTAINS(out, "\xe2\x80\xa6(300 bytes)");
    CHECK_EQ_U(count_lines(errf), 0);

    CHECK_EQ_U(test_run("%s/feather-verify --info '%s' 2>'%s'", bin, badp, errf), 2);
    CHECK_EQ_U(count_lines(errf), 1);
    size_t len;
    char *msg = (char *)stb_read(errf, &len);
    REQUIRE(msg);
    msg[len] = 0;
    CHECK_STR_CONTAINS(msg, "feather-verify: ");
    CHECK_STR_CONTAINS(msg, "bad.safetensors: tensor 't': data_offsets [0, 12] hold 12 bytes but F16 [2, 4] needs 16");
    free(msg);

    /* Both: the valid one is still described; the worst status wins. */
    CHECK_EQ_U(test_run("%s/feather-verify --info '%s' '%s' 2>'%s'", bin, badp, good, errf), 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "blk.0.w");
    CHECK_EQ_U(count_lines(errf), 1);

    CHECK_EQ_U(test_run("%s/feather-verify --info", bin), 64);
    CHECK_EQ_U(test_run("%s/feather-verify --bogus '%s'", bin, good), 64);
    CHECK_EQ_U(test_run("%s/feather-verify --help", bin), 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "--info");
    stb_free(&b);
    stb_free(&bad);
}

TEST(reader_verify_info_sharded) {
    const char *dir = test_path("vs");
    make_shards(dir);
    write_index("model.safetensors.index.json", "{\"weight_map\":{" GOOD_MAP "}}");
    CHECK_EQ_U(test_run("%s/feather-verify --info '%s'", test_bindir(), dir), 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "shards: 2");
    CHECK_STR_CONTAINS(test_cmd_output(), "model-00002-of-00002.safetensors");
}

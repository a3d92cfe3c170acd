/*
 * libFuzzer target for whole conversions and their check. Every input is written to a file and
 * converted on the CPU, one thread, three ways (packed e5m2 with channel scales, packed with
 * block:16, ComfyUI's plain layout in e4m3fn with one scale per tensor) and a fourth that the
 * input's hash picks among the other scale modes and layouts, with or without
 * --allow-nonfinite, then:
 *   - a conversion that fails must leave nothing under the output's name, and the input as it
 *     was;
 *   - one that succeeds must give a file that feather_verify passes with the input as its
 *     reference: whatever the converter writes, the verifier must accept, and every tensor of
 *     the input must be accounted for;
 *   - the converted file, with some of its bytes changed, is verified again: that must not
 *     crash, and a change inside the tensors' data must be found.
 * The input compressed with zstd must convert as the plain file does (the same tensor bytes, or
 * a failure for both), and the input taken as a .zst file as it is must fail cleanly or convert.
 * The input split into two shards with an index must convert as the plain file does too (the same
 * bytes for every tensor, or a failure for both, leaving the shards as they were and no output),
 * and the sharded output must pass feather_verify against the sharded input.
 * The input is also verified as if it were a converted file, as a downloaded one may be
 * anything: that must not crash. Seeds: the header corpus, the quantised layouts (corpus/q_*)
 * and small 16- and 32-bit models (corpus/c_*), which convert, and converted files (corpus/f_*).
 *
 *   make fuzz FUZZ_SECONDS=60   (this target runs for half of them)
 */
#include "feather/convert.h"
#include "feather/safetensors.h"
#include "feather/verify.h"

#include <dirent.h>
#include <zstd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[4096], in_path[4200], out_path[4200], zin_path[4200], zout_path[4200];
static char shard_path[2][4200], idx_path[4200], sout_path[4200];
static feather_ctx *ctx;

static void die(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_convert: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

/* Removes every file of the directory but the input and, with keep_out, the output. */
static void clear_dir(int keep_out) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(p, in_path) && (!keep_out || strcmp(p, out_path)))
            unlink(p);
    }
    closedir(d);
}

static void cleanup(void) {
    clear_dir(0);
    unlink(in_path);
    rmdir(dir);
}

static void setup(void) {
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/feather-fuzz-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(dir)) die("mkdtemp failed", dir);
    snprintf(in_path, sizeof in_path, "%s/in.safetensors", dir);
    snprintf(out_path, sizeof out_path, "%s/out.safetensors", dir);
    snprintf(zin_path, sizeof zin_path, "%s/in.safetensors.zst", dir);
    snprintf(zout_path, sizeof zout_path, "%s/zout.safetensors", dir);
    for (int s = 0; s < 2; s++) snprintf(shard_path[s], sizeof shard_path[s], "%s/in-%05d-of-00002.safetensors", dir, s + 1);
    snprintf(idx_path, sizeof idx_path, "%s/in.safetensors.index.json", dir);
    snprintf(sout_path, sizeof sout_path, "%s/sout.safetensors.index.json", dir);
    if (!(ctx = feather_ctx_new(1))) die("no context", NULL);
    atexit(cleanup);
}

static void write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) die("cannot write", path);
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*n ? *n : 1);
    if (!p || fread(p, 1, *n, f) != *n) die("cannot read", path);
    fclose(f);
    return p;
}

/* The file at path still holds the n bytes at p (an input is never touched). */
static void unchanged(const char *path, const void *p, size_t n, const char *what) {
    size_t got;
    uint8_t *again = read_all(path, &got);
    if (got != n || memcmp(again, p, n)) die(what, path);
    free(again);
}

/* A failure's message is one line. */
static void one_line(const feather_error *err) {
    if (!err->message[0] || strchr(err->message, '\n')) die("a failure without one line of message", err->message);
}

/* The directory holds the input and the output, or the input alone: no partial output, no
 * temporary file left behind. */
static void only_input_left(int with_output) {
    int count = 0;
    for (int i = 0; i < 2; i++) {
        struct stat st;
        count += stat(i ? out_path : in_path, &st) == 0;
    }
    if (count != 1 + with_output) die(with_output ? "output missing" : "output left by a failed conversion", NULL);
    DIR *d = opendir(dir);
    if (!d) die("cannot list", dir);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d));) entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    if (entries != 1 + with_output) die("a stray file is left in", dir);
}

/* pass: 1 the file must pass, 0 it must fail, -1 either. */
static void verify_must(const char *path, int pass, const char *reference) {
    feather_verify_options vo;
    feather_verify_defaults(&vo);
    vo.reference = reference;
    vo.device = FEATHER_DEVICE_CPU;
    vo.tokens = 3;
    feather_verify_report *rep = NULL;
    feather_error err = {0};
    feather_status st = feather_verify(ctx, path, &vo, &rep, &err);
    if (pass == 1 && (st != FEATHER_OK || !rep || !feather_report_ok(rep))) {
        const char *why = rep && rep->file_problem[0] ? rep->file_problem : err.message;
        for (size_t i = 0; rep && !rep->file_problem[0] && i < rep->count; i++)
            if (rep->tensors[i].problem[0]) why = rep->tensors[i].problem;
        die("verification of a converted file failed", why);
    }
    if (pass == 0 && st == FEATHER_OK) die("a change in a converted file's data went unseen", NULL);
    feather_verify_report_free(rep);
}

/* The bytes after the header: every tensor's data. */
static uint8_t *data_section(const char *path, size_t *n) {
    uint8_t *b = read_all(path, n);
    uint64_t hlen;
    memcpy(&hlen, b, 8);
    if (*n < 8 || hlen > *n - 8) die("a converted file's header runs past its end", path);
    *n -= 8 + hlen;
    memmove(b, b + 8 + hlen, *n);
    return b;
}

/* Converts bytes given as a .zst input with o; the result (the status, the output's tensor
 * bytes when it succeeded, or no output when it failed) must be plain's. plain_ok < 0: any. */
static void through_zstd(const void *z, size_t zn, const feather_convert_options *o, int plain_ok) {
    write_all(zin_path, z, zn);
    feather_convert_result res;
    feather_error err = {0};
    const feather_status st = feather_convert(ctx, zin_path, zout_path, o, &res, &err);
    struct stat sb;
    if (st != FEATHER_OK && stat(zout_path, &sb) == 0) die("output left by a failed .zst conversion", NULL);
    if (plain_ok >= 0 && (st == FEATHER_OK) != plain_ok)
        die(".zst input converts otherwise than the plain file", st ? err.message : "it succeeds");
    if (st == FEATHER_OK && plain_ok > 0) {
        size_t a, b;
        uint8_t *x = data_section(out_path, &a), *y = data_section(zout_path, &b);
        if (a != b || memcmp(x, y, a)) die(".zst input gives other tensor bytes than the plain file", NULL);
        free(x);
        free(y);
    }
    unlink(zin_path);
    unlink(zout_path);
}

/* Writes the input as two shards (the first half of its tensors, then the rest, each with the
 * input's metadata) and their index. A recorded feather.xxh3 is the writer's to make: where the
 * input has one, the shards get their own, of the same bytes. 0 when the input does not open,
 * a tensor does not match its recorded hash, or it has fewer than two tensors. */
static int write_shards(void) {
    feather_reader *r;
    feather_error err = {0};
    if (feather_open(&r, in_path, 0, &err)) return 0;
    const size_t n = feather_count(r);
    int sound = n >= 2;
    for (size_t i = 0; sound && i < n; i++) {
        const void *p;
        sound = feather_tensor_data(r, feather_tensor_at(r, i), &p, &err) == FEATHER_OK;
    }
    if (!sound) {
        feather_close(r);
        return 0;
    }
    size_t cap = 256, len = 0;
    char *idx = malloc(cap);
    if (!idx) die("out of memory", NULL);
    len += (size_t)snprintf(idx, cap, "{\"metadata\":{},\"weight_map\":{");
    for (int s = 0; s < 2; s++) {
        const size_t lo = s ? n / 2 : 0, hi = s ? n : n / 2;
        feather_write_options wo = {.overwrite = 1, .no_hashes = !feather_metadata_get(r, 0, FEATHER_HASH_KEY)};
        feather_writer *w;
        if (feather_writer_open(&w, shard_path[s], &wo, &err)) die("cannot write a shard", err.message);
        for (size_t i = 0; i < feather_metadata_count(r, 0); i++)
            if (strcmp(feather_metadata_key(r, 0, i), FEATHER_HASH_KEY) && feather_writer_metadata(w, feather_metadata_key(r, 0, i), feather_metadata_value(r, 0, i), &err))
                die("cannot copy the metadata", err.message);
        for (size_t i = lo; i < hi; i++) {
            const feather_tensor *t = feather_tensor_at(r, i);
            if (feather_writer_tensor(w, t->name, t->dtype, t->ndim, t->shape, &err)) die("cannot declare a tensor", err.message);
            const char *base = strrchr(shard_path[s], '/') + 1;
            /* the name as a JSON string (the reader took it as valid UTF-8) */
            char name[6 * 4096 + 1] = "";
            size_t o = 0;
            for (const unsigned char *c = (const unsigned char *)t->name; *c && o + 7 < sizeof name; c++)
                o += (size_t)(*c == '"' || *c == '\\' ? snprintf(name + o, sizeof name - o, "\\%c", *c)
                              : *c < 0x20       ? snprintf(name + o, sizeof name - o, "\\u%04x", *c)
                                                : snprintf(name + o, sizeof name - o, "%c", *c));
            const size_t need = len + o + strlen(base) + 16;
            if (need > cap && !(idx = realloc(idx, cap = 2 * need))) die("out of memory", NULL);
            len += (size_t)snprintf(idx + len, cap - len, "%s\"%s\":\"%s\"", s || i ? "," : "", name, base);
        }
        if (feather_writer_begin(w, &err)) die("cannot begin a shard", err.message);
        for (size_t i = 0; i < feather_writer_count(w); i++) {
            const void *p;
            if (feather_tensor_data(r, feather_find(r, feather_writer_name_at(w, i)), &p, &err) ||
                feather_writer_write(w, p, (size_t)feather_writer_nbytes_at(w, i), &err))
                die("cannot copy a tensor", err.message);
        }
        if (feather_writer_commit(w, &err)) die("cannot commit a shard", err.message);
    }
    feather_close(r);
    if (len + 3 > cap && !(idx = realloc(idx, cap = len + 3))) die("out of memory", NULL);
    len += (size_t)snprintf(idx + len, cap - len, "}}");
    write_all(idx_path, idx, len);
    free(idx);
    return 1;
}

/* The tensors of two files (or sharded models) are the same, name by name. */
static void same_tensors(const char *a_path, const char *b_path) {
    feather_reader *a, *b;
    feather_error err = {0};
    if (feather_open(&a, a_path, 0, &err) || feather_open(&b, b_path, 0, &err)) die("cannot open an output", err.message);
    if (feather_count(a) != feather_count(b)) die("sharded input converts to other tensors than the plain file", NULL);
    for (size_t i = 0; i < feather_count(a); i++) {
        const feather_tensor *x = feather_tensor_at(a, i), *y = feather_find(b, x->name);
        const void *px, *py;
        if (!y || x->dtype != y->dtype || x->nbytes != y->nbytes)
            die("sharded input converts to other tensors than the plain file", x->name);
        if (feather_tensor_data(a, x, &px, &err) || feather_tensor_data(b, y, &py, &err)) die("cannot read an output", err.message);
        if (memcmp(px, py, (size_t)x->nbytes)) die("sharded input gives other tensor bytes than the plain file", x->name);
    }
    feather_close(a);
    feather_close(b);
}

/* Converts the input as two shards with o; as through_zstd, the result must be plain's. */
static void through_shards(const feather_convert_options *o, int plain_ok) {
    if (!write_shards()) return;
    size_t before[2];
    uint8_t *bytes[2];
    for (int s = 0; s < 2; s++) bytes[s] = read_all(shard_path[s], &before[s]);
    feather_convert_result res;
    feather_error err = {0};
    const feather_status st = feather_convert(ctx, idx_path, sout_path, o, &res, &err);
    for (int s = 0; s < 2; s++) {
        unchanged(shard_path[s], bytes[s], before[s], "a shard of the input was changed");
        free(bytes[s]);
    }
    struct stat sb;
    if (st != FEATHER_OK && stat(sout_path, &sb) == 0) die("output left by a failed sharded conversion", NULL);
    if (st != FEATHER_OK) one_line(&err);
    if ((st == FEATHER_OK) != plain_ok) die("sharded input converts otherwise than the plain file", st ? err.message : "it succeeds");
    if (st == FEATHER_OK) {
        same_tensors(out_path, sout_path);
        verify_must(sout_path, 1, idx_path);
    }
    clear_dir(1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!ctx) setup();
    static const struct {
        feather_layout layout;
        feather_fp8 format;
        feather_scale_mode mode;
        unsigned group;
    } ways[] = {
        {FEATHER_LAYOUT_PACKED, FEATHER_FP8_E5M2, FEATHER_SCALE_CHANNEL, 0},
        {FEATHER_LAYOUT_PACKED, FEATHER_FP8_E5M2, FEATHER_SCALE_BLOCK, 16},
        {FEATHER_LAYOUT_COMFY, FEATHER_FP8_E4M3FN, FEATHER_SCALE_TENSOR, 0},
        /* the fourth is one of these */
        {FEATHER_LAYOUT_PACKED, FEATHER_FP8_E5M2, FEATHER_SCALE_TENSOR, 0},
        {FEATHER_LAYOUT_PACKED, FEATHER_FP8_E5M2, FEATHER_SCALE_ABSMAX, 0},
        {FEATHER_LAYOUT_PACKED, FEATHER_FP8_E5M2, FEATHER_SCALE_NONE, 0},
        {FEATHER_LAYOUT_PACKED, FEATHER_FP8_E5M2, FEATHER_SCALE_BLOCK, 32},
        {FEATHER_LAYOUT_PACKED, FEATHER_FP8_E5M2, FEATHER_SCALE_BLOCK, 128},
        {FEATHER_LAYOUT_COMFY, FEATHER_FP8_E5M2, FEATHER_SCALE_TENSOR, 0},
        {FEATHER_LAYOUT_COMFY, FEATHER_FP8_E4M3FN, FEATHER_SCALE_NONE, 0},
        {FEATHER_LAYOUT_COMFY, FEATHER_FP8_E5M2, FEATHER_SCALE_ABSMAX, 0},
    };
    const uint64_t pick = feather_hash(data, size);
    const size_t extra = 3 + (size_t)(pick % (sizeof ways / sizeof ways[0] - 3));
    write_all(in_path, data, size);
    verify_must(in_path, -1, NULL);
    for (size_t i = 0; i < 4; i++) {
        const size_t w = i < 3 ? i : extra;
        feather_convert_options o;
        feather_convert_defaults(&o);
        o.layout = ways[w].layout;
        o.quant.format = ways[w].format;
        o.quant.mode = ways[w].mode;
        o.quant.group = ways[w].group;
        o.quant.allow_nonfinite = i == 3 && (pick >> 32) % 2;
        o.device = FEATHER_DEVICE_CPU;
        o.overwrite = 1;
        feather_convert_result res;
        feather_error err = {0};
        unlink(out_path);
        const feather_status st = feather_convert(ctx, in_path, out_path, &o, &res, &err);
        unchanged(in_path, data, size, "the input was changed");
        only_input_left(st == FEATHER_OK);
        if (i == 0) {
            const size_t cap = ZSTD_compressBound(size);
            void *z = malloc(cap);
            const size_t zn = z ? ZSTD_compress(z, cap, data, size, 1) : 0;
            if (!z || ZSTD_isError(zn)) die("cannot compress the input", NULL);
            through_zstd(z, zn, &o, st == FEATHER_OK);
            free(z);
            through_zstd(data, size, &o, -1);
            through_shards(&o, st == FEATHER_OK);
            only_input_left(st == FEATHER_OK);
        }
        if (st != FEATHER_OK) {
            one_line(&err);
            continue;
        }
        verify_must(out_path, 1, in_path);
        /* A byte of a converted tensor's data changed: its recorded hash must catch it. */
        size_t n;
        uint8_t *out = read_all(out_path, &n);
        uint64_t hlen;
        memcpy(&hlen, out, 8);
        if (n > 8 + hlen) {
            out[8 + hlen + (size_t)(data[size / 2] * 2654435761u) % (n - 8 - hlen)] ^= 0x40;
            write_all(out_path, out, n);
            verify_must(out_path, 0, NULL);
        }
        free(out);
    }
    return 0;
}

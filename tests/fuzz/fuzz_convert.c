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
static feather_ctx *ctx;

static void die(const char *what, const char *detail) {
    fprintf(stderr, "fuzz_convert: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

static void cleanup(void) {
    unlink(in_path);
    unlink(out_path);
    unlink(zin_path);
    unlink(zout_path);
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
        size_t n;
        uint8_t *again = read_all(in_path, &n);
        if (n != size || memcmp(again, data, size)) die("the input was changed", NULL);
        free(again);
        only_input_left(st == FEATHER_OK);
        if (i == 0) {
            const size_t cap = ZSTD_compressBound(size);
            void *z = malloc(cap);
            const size_t zn = z ? ZSTD_compress(z, cap, data, size, 1) : 0;
            if (!z || ZSTD_isError(zn)) die("cannot compress the input", NULL);
            through_zstd(z, zn, &o, st == FEATHER_OK);
            free(z);
            through_zstd(data, size, &o, -1);
            only_input_left(st == FEATHER_OK);
        }
        if (st != FEATHER_OK) {
            if (!err.message[0] || strchr(err.message, '\n')) die("a failure without one line of message", err.message);
            continue;
        }
        verify_must(out_path, 1, in_path);
        /* A byte of a converted tensor's data changed: its recorded hash must catch it. */
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

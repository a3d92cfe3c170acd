/* Conversion end to end: the library entry point and the feather-convert program. */
#include "test.h"
#include "testutil.h"
#include "feather/convert.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const tspec small_model[] = {
    {"blocks.0.attn.qkv.weight", FEATHER_BF16, 2, {96, 64}},
    {"blocks.0.attn.qkv.bias", FEATHER_BF16, 1, {96}},
    {"blocks.0.mlp.fc1.weight", FEATHER_F16, 2, {128, 64}},
    {"blocks.0.mlp.fc2.weight", FEATHER_F32, 2, {64, 128}},
    {"blocks.0.norm.weight", FEATHER_F32, 1, {64}},
    {"embed.weight", FEATHER_BF16, 2, {10, 64}},
};
#define NSMALL (sizeof small_model / sizeof small_model[0])

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static size_t count_dir(const char *dir) {
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "ls -A '%s' | wc -l", dir);
    FILE *f = popen(cmd, "r");
    size_t n = 0;
    if (f) {
        if (fscanf(f, "%zu", &n) != 1) n = 0;
        pclose(f);
    }
    return n;
}

static const char *bin(const char *prog) {
    static char buf[4][1024];
    static int slot;
    char *b = buf[slot++ & 3];
    snprintf(b, 1024, "%s/%s", test_bindir(), prog);
    return b;
}

/* Decodes the output weight back to f32 and compares with the input: every converted tensor
 * must dequantise to within the e5m2 step of the original. */
static void check_roundtrip(const char *in, const char *out, int packed) {
    feather_error err = {0};
    feather_reader *ri, *ro;
    REQUIRE(feather_open(&ri, in, 0, &err) == FEATHER_OK);
    REQUIRE(feather_open(&ro, out, 0, &err) == FEATHER_OK);
    for (size_t i = 0; i < feather_count(ri); i++) {
        const feather_tensor *t = feather_tensor_at(ri, i), *u = feather_find(ro, t->name);
        REQUIRE(u);
        const void *a, *b;
        REQUIRE(feather_tensor_data(ri, t, &a, &err) == FEATHER_OK);
        REQUIRE(feather_tensor_data(ro, u, &b, &err) == FEATHER_OK);
        if (u->dtype == t->dtype) {
            CHECK(u->nbytes == t->nbytes && memcmp(a, b, t->nbytes) == 0);
            continue;
        }
        CHECK(u->dtype == FEATHER_F8_E5M2);
        uint64_t n = t->shape[0], k = t->shape[1];
        if (packed) CHECK(u->ndim == 3 && u->shape[0] == k / 16 && u->shape[1] == n && u->shape[2] == 16);
        char sname[512];
        snprintf(sname, sizeof sname, "%s_scale", t->name);
        const feather_tensor *s = feather_find(ro, sname);
        REQUIRE(s && s->dtype == FEATHER_F32 && s->ndim == 1 && s->shape[0] == n);
        const void *sd;
        REQUIRE(feather_tensor_data(ro, s, &sd, &err) == FEATHER_OK);
        float *deq = malloc(n * k * sizeof(float));
        feather_dequantize(b, packed, FEATHER_FP8_E5M2, FEATHER_SCALE_CHANNEL, 0, sd, n, k, deq);
        double num = 0, den = 0;
        for (uint64_t j = 0; j < n * k; j++) {
            double w = t->dtype == FEATHER_F32    ? ((const float *)a)[j]
                       : t->dtype == FEATHER_F16 ? feather_f16_to_f32(((const uint16_t *)a)[j])
                                                 : feather_bf16_to_f32(((const uint16_t *)a)[j]);
            num += (w - deq[j]) * (w - deq[j]);
            den += w * w;
        }
        free(deq);
        double snr = 10 * log10(den / num);
        if (!(snr > 24.0)) test_fail(__FILE__, __LINE__, "%s: SNR %.2f dB", t->name, snr);
    }
    feather_close(ri);
    feather_close(ro);
}

TEST(convert_library_roundtrip_and_metadata) {
    const char *in = test_path("model.safetensors"), *out = test_path("model-fp8e5m2.safetensors");
    const char *meta[] = {"format", "pt", "feather.bogus", "dropped", NULL};
    REQUIRE(tu_write_model(in, small_model, NSMALL, 7, meta) == 0);
    feather_ctx *ctx = feather_ctx_new(2);
    feather_convert_options o;
    feather_convert_defaults(&o);
    o.command_line = "feather-convert model.safetensors";
    feather_convert_result res;
    feather_error err = {0};
    char def[1024];
    REQUIRE(feather_default_output(in, NULL, FEATHER_FP8_E5M2, 0, def, sizeof def, &err) == FEATHER_OK);
    CHECK(!strcmp(def, out));
    feather_status st = feather_convert(ctx, in, out, &o, &res, &err);
    if (st) test_fail(__FILE__, __LINE__, "convert: %s", err.message);
    REQUIRE(st == FEATHER_OK);
    CHECK_EQ_U(res.tensors_converted, 3);
    CHECK_EQ_U(res.tensors_kept, 3);
    CHECK(!strcmp(res.preset, "generic"));
    CHECK(res.snr_worst_db > 24 && res.snr_mean_db >= res.snr_worst_db);
    CHECK(res.bytes_out < res.bytes_in);
    check_roundtrip(in, out, 1);

    feather_reader *r;
    REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
    CHECK(!strcmp(feather_metadata_get(r, 0, "format"), "pt"));
    CHECK(!feather_metadata_get(r, 0, "feather.bogus"));
    CHECK(!strcmp(feather_metadata_get(r, 0, "feather.format"), "feather-fp8/1"));
    CHECK(!strcmp(feather_metadata_get(r, 0, "feather.layout"), "packed"));
    CHECK(!strcmp(feather_metadata_get(r, 0, "feather.fp8"), "e5m2"));
    CHECK(!strcmp(feather_metadata_get(r, 0, "feather.scale"), "channel"));
    CHECK(!strcmp(feather_metadata_get(r, 0, "feather.source"), "model.safetensors"));
    CHECK(!strcmp(feather_metadata_get(r, 0, "feather.command"), "feather-convert model.safetensors"));
    CHECK_STR_CONTAINS(feather_metadata_get(r, 0, "feather.tensors"),
                       "\"blocks.0.mlp.fc1.weight\":{\"dtype\":\"F16\",\"shape\":[128,64]}");
    CHECK(feather_metadata_get(r, 0, "feather.xxh3") != NULL);
    const char *sh = feather_metadata_get(r, 0, "feather.source_xxh3");
    REQUIRE(sh && strlen(sh) == 16);
    size_t len;
    uint8_t *bytes = tu_read_file(in, &len);
    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)feather_hash(bytes, len));
    free(bytes);
    CHECK(!strcmp(sh, hex));
    feather_close(r);

    /* Deterministic: the same conversion again gives the same bytes. */
    const char *again = test_path("again.safetensors");
    REQUIRE(feather_convert(ctx, in, again, &o, &res, &err) == FEATHER_OK);
    CHECK(tu_files_equal(out, again));
    feather_ctx_free(ctx);
}

/* --device auto's rule (feather_convert_device): the GPU where one is usable only below 8 cores,
 * with channel or block scales, from half a gigabyte of weights per core; the cores counted are
 * those the process may run on. */
TEST(convert_device_auto_by_cores_mode_and_size) {
    const feather_scale_mode B = FEATHER_SCALE_BLOCK, C = FEATHER_SCALE_CHANNEL;
    const uint64_t half = 500000000ull, huge = 1ull << 50;
    CHECK(feather_convert_device(FEATHER_DEVICE_CPU, B, huge) == FEATHER_DEVICE_CPU);
    CHECK(feather_convert_device(FEATHER_DEVICE_GPU, B, huge) == FEATHER_DEVICE_GPU);
    CHECK(feather_convert_device(FEATHER_DEVICE_GPU, FEATHER_SCALE_TENSOR, 0) == FEATHER_DEVICE_GPU); /* asked for */
    const int all = feather_cores();
    CHECK(all >= 1);
    CHECK(feather_convert_device(FEATHER_DEVICE_AUTO, B, huge) == (all >= 8 ? FEATHER_DEVICE_CPU : FEATHER_DEVICE_AUTO));
    REQUIRE(tu_confine_cores(1) == 1);
    CHECK_EQ_U(feather_cores(), 1);
    CHECK(feather_convert_device(FEATHER_DEVICE_AUTO, B, half) == FEATHER_DEVICE_AUTO);
    CHECK(feather_convert_device(FEATHER_DEVICE_AUTO, C, huge) == FEATHER_DEVICE_AUTO);
    CHECK(feather_convert_device(FEATHER_DEVICE_AUTO, B, half - 1) == FEATHER_DEVICE_CPU);
    CHECK(feather_convert_device(FEATHER_DEVICE_AUTO, C, 0) == FEATHER_DEVICE_CPU);
    static const feather_scale_mode whole[] = {FEATHER_SCALE_NONE, FEATHER_SCALE_ABSMAX, FEATHER_SCALE_TENSOR};
    for (int i = 0; i < 3; i++) CHECK(feather_convert_device(FEATHER_DEVICE_AUTO, whole[i], huge) == FEATHER_DEVICE_CPU);
    feather_ctx *ctx = feather_ctx_new(0); /* the default pool follows the same count */
    CHECK(ctx && feather_ctx_threads(ctx) == 1);
    feather_ctx_free(ctx);
    if (tu_confine_cores(2) == 2) { /* the size scales with the cores */
        CHECK(feather_convert_device(FEATHER_DEVICE_AUTO, B, 2 * half) == FEATHER_DEVICE_AUTO);
        CHECK(feather_convert_device(FEATHER_DEVICE_AUTO, B, 2 * half - 1) == FEATHER_DEVICE_CPU);
    }
    if (tu_confine_cores(8) == 8) {
        CHECK_EQ_U(feather_cores(), 8);
        CHECK(feather_convert_device(FEATHER_DEVICE_AUTO, B, huge) == FEATHER_DEVICE_CPU);
    } else {
        printf("    (fewer than 8 cores here: the rule's CPU side is checked where there are 8)\n");
    }
    tu_confine_cores(0);
    CHECK_EQ_U(feather_cores(), all);
}

TEST(convert_skips_up_to_date_and_refuses_stale_outputs) {
    const char *in = test_path("m.safetensors"), *out = test_path("m-fp8e5m2.safetensors");
    REQUIRE(tu_write_model(in, small_model, NSMALL, 3, NULL) == 0);
    feather_ctx *ctx = feather_ctx_new(1);
    feather_convert_options o;
    feather_convert_defaults(&o);
    feather_convert_result res;
    feather_error err = {0};
    REQUIRE(feather_convert(ctx, in, out, &o, &res, &err) == FEATHER_OK);
    CHECK(!res.skipped);
    REQUIRE(feather_convert(ctx, in, out, &o, &res, &err) == FEATHER_OK);
    CHECK(res.skipped);
    o.quant.mode = FEATHER_SCALE_TENSOR; /* other options: the output is not this conversion's */
    CHECK(feather_convert(ctx, in, out, &o, &res, &err) == FEATHER_E_EXISTS);
    CHECK_STR_CONTAINS(err.message, "--force");
    o.overwrite = 1;
    CHECK(feather_convert(ctx, in, out, &o, &res, &err) == FEATHER_OK && !res.skipped);
    /* A different input under the same name: not up to date either. */
    o.overwrite = 0;
    REQUIRE(tu_write_model(in, small_model, NSMALL, 4, NULL) == 0);
    CHECK(feather_convert(ctx, in, out, &o, &res, &err) == FEATHER_E_EXISTS);

    /* Same input, same options, but made under other rules (a preset that kept a layer this one
     * converts): the options name the preset, not its rules, so the tensors must say it. */
    o.overwrite = 1;
    REQUIRE(feather_convert(ctx, in, out, &o, &res, &err) == FEATHER_OK);
    feather_reader *r = NULL;
    REQUIRE(feather_open(&r, out, FEATHER_OPEN_HEADER_ONLY, &err) == FEATHER_OK);
    char opt[1024], src[64];
    snprintf(opt, sizeof opt, "%s", feather_metadata_get(r, 0, "feather.options"));
    snprintf(src, sizeof src, "%s", feather_metadata_get(r, 0, "feather.source_xxh3"));
    tspec old[16];
    size_t n = 0;
    for (size_t i = 0; i < feather_count(r) && n < 16; i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        if (!strcmp(t->name, "blocks.0.mlp.fc1.weight_scale")) continue;
        old[n] = (tspec){t->name, t->dtype, t->ndim, {0}};
        for (unsigned d = 0; d < t->ndim; d++) old[n].shape[d] = t->shape[d];
        if (!strcmp(t->name, "blocks.0.mlp.fc1.weight")) old[n] = (tspec){t->name, FEATHER_F16, 2, {128, 64}};
        n++;
    }
    const char *meta[] = {"feather.options", opt, "feather.source_xxh3", src, NULL};
    REQUIRE(tu_write_model(out, old, n, 5, meta) == 0);
    feather_close(r);
    o.overwrite = 0;
    CHECK(feather_convert(ctx, in, out, &o, &res, &err) == FEATHER_E_EXISTS);
    CHECK(!res.skipped);
    CHECK_STR_CONTAINS(err.message, "rules");
    feather_ctx_free(ctx);
}

TEST(convert_comfy_layout_and_back_without_requantising) {
    const char *in = test_path("m.safetensors"), *packed = test_path("p.safetensors"),
               *comfy = test_path("c.safetensors"), *back = test_path("b.safetensors");
    REQUIRE(tu_write_model(in, small_model, NSMALL, 5, NULL) == 0);
    feather_ctx *ctx = feather_ctx_new(2);
    feather_convert_options o;
    feather_convert_defaults(&o);
    o.quant.mode = FEATHER_SCALE_TENSOR;
    feather_convert_result res;
    feather_error err = {0};
    REQUIRE(feather_convert(ctx, in, packed, &o, &res, &err) == FEATHER_OK);
    o.layout = FEATHER_LAYOUT_COMFY;
    feather_status st = feather_convert(ctx, packed, comfy, &o, &res, &err);
    if (st) test_fail(__FILE__, __LINE__, "to comfy: %s", err.message);
    REQUIRE(st == FEATHER_OK);
    CHECK_EQ_U(res.tensors_converted, 3);
    /* again: up to date, though each scale's name was the input's too (which the conversion
     * drops and writes anew) */
    CHECK(feather_convert(ctx, packed, comfy, &o, &res, &err) == FEATHER_OK && res.skipped);
    feather_reader *r;
    REQUIRE(feather_open(&r, comfy, 0, &err) == FEATHER_OK);
    const feather_tensor *w = feather_find(r, "blocks.0.mlp.fc1.weight");
    REQUIRE(w && w->dtype == FEATHER_F8_E5M2 && w->ndim == 2 && w->shape[0] == 128 && w->shape[1] == 64);
    const feather_tensor *s = feather_find(r, "blocks.0.mlp.fc1.weight_scale");
    CHECK(s && s->ndim == 0 && s->dtype == FEATHER_F32);
    const feather_tensor *cq = feather_find(r, "blocks.0.mlp.fc1.comfy_quant");
    REQUIRE(cq && cq->dtype == FEATHER_U8);
    const void *cqd;
    REQUIRE(feather_tensor_data(r, cq, &cqd, &err) == FEATHER_OK);
    CHECK(cq->nbytes > 20 && memmem(cqd, cq->nbytes, "float8_e5m2", 11));
    CHECK_STR_CONTAINS(feather_metadata_get(r, 0, "_quantization_metadata"), "\"blocks.0.mlp.fc1\":{\"format\":\"float8_e5m2\"");
    /* The original dtypes travel through the repack. */
    CHECK_STR_CONTAINS(feather_metadata_get(r, 0, "feather.tensors"), "\"blocks.0.attn.qkv.weight\":{\"dtype\":\"BF16\"");
    feather_close(r);
    o.layout = FEATHER_LAYOUT_PACKED;
    REQUIRE(feather_convert(ctx, comfy, back, &o, &res, &err) == FEATHER_OK);
    /* Same fp8 bytes and scales as the first conversion. */
    feather_reader *a, *b;
    REQUIRE(feather_open(&a, packed, 0, &err) == FEATHER_OK);
    REQUIRE(feather_open(&b, back, 0, &err) == FEATHER_OK);
    for (size_t i = 0; i < feather_count(a); i++) {
        const feather_tensor *x = feather_tensor_at(a, i), *y = feather_find(b, x->name);
        REQUIRE(y);
        const void *dx, *dy;
        REQUIRE(feather_tensor_data(a, x, &dx, &err) == FEATHER_OK);
        REQUIRE(feather_tensor_data(b, y, &dy, &err) == FEATHER_OK);
        CHECK(x->nbytes == y->nbytes && memcmp(dx, dy, x->nbytes) == 0);
    }
    feather_close(a);
    feather_close(b);
    feather_ctx_free(ctx);
}

/* An fp8 weight repacked as it is, whose codes hold Inf and NaN: refused in one line with no
 * output, as a cast refuses such values; with allow_nonfinite mapped as a cast maps them (e5m2's
 * ±Inf to ±max, NaN to 0; e4m3fn's NaN to 0), with a warning, in a file the verifier passes. */
TEST(convert_repacked_codes_of_inf_and_nan) {
    const char *in = test_path("nan.safetensors"), *out = test_path("nan-out.safetensors");
    feather_ctx *ctx = feather_ctx_new(2);
    for (int f = 0; f < 2; f++) {
        const int e5 = f == 0;
        static const uint64_t shape[2] = {32, 64};
        uint8_t q[32 * 64];
        for (int i = 0; i < 32 * 64; i++) q[i] = (uint8_t)((i * 37) % 0x70) | (uint8_t)(i & 0x80);
        /* e5m2: +Inf, -Inf, NaN; e4m3fn: NaN, -NaN */
        q[3] = e5 ? 0x7c : 0x7f;
        q[700] = e5 ? 0xfc : 0xff;
        q[2047] = e5 ? 0x7e : 0x05;
        const float scale = 0.5f;
        feather_error err = {0};
        feather_writer *w;
        feather_write_options wo = {.no_hashes = 1, .overwrite = 1};
        REQUIRE(feather_writer_open(&w, in, &wo, &err) == FEATHER_OK);
        REQUIRE(!feather_writer_tensor(w, "x.weight", e5 ? FEATHER_F8_E5M2 : FEATHER_F8_E4M3, 2, shape, &err) &&
                !feather_writer_tensor(w, "x.weight_scale", FEATHER_F32, 0, NULL, &err) &&
                !feather_writer_begin(w, &err) && !feather_writer_write(w, q, sizeof q, &err) &&
                !feather_writer_write(w, &scale, 4, &err) && !feather_writer_commit(w, &err));
        feather_convert_options o;
        feather_convert_result res;
        feather_convert_defaults(&o);
        o.layout = FEATHER_LAYOUT_COMFY;
        o.quant.mode = FEATHER_SCALE_TENSOR;
        o.quant.format = e5 ? FEATHER_FP8_E5M2 : FEATHER_FP8_E4M3FN;
        o.overwrite = 1;
        unlink(out);
        CHECK(feather_convert(ctx, in, out, &o, &res, &err) == FEATHER_E_INVALID);
        CHECK_STR_CONTAINS(err.message, e5 ? "tensor 'x.weight': 3 NaN/Inf codes (use --allow-nonfinite"
                                           : "tensor 'x.weight': 2 NaN/Inf codes (use --allow-nonfinite");
        CHECK(!exists(out));
        o.quant.allow_nonfinite = 1;
        feather_status st = feather_convert(ctx, in, out, &o, &res, &err);
        if (st) test_fail(__FILE__, __LINE__, "%s", err.message);
        REQUIRE(st == FEATHER_OK);
        CHECK(res.nwarnings == 1 && strstr(res.warnings[0], e5 ? "3 NaN/Inf values mapped" : "2 NaN/Inf values mapped"));
        feather_reader *r;
        REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
        const feather_tensor *t = feather_find(r, "x.weight");
        const void *d;
        REQUIRE(t && t->nbytes == sizeof q && !feather_tensor_data(r, t, &d, &err));
        uint8_t want[32 * 64];
        memcpy(want, q, sizeof q);
        want[3] = e5 ? 0x7b : 0;
        want[700] = e5 ? 0xfb : 0;
        want[2047] = e5 ? 0 : 0x05;
        CHECK(memcmp(d, want, sizeof want) == 0);
        feather_close(r);
        REQUIRE(test_run("'%s' '%s'", bin("feather-verify"), out) == 0);
    }
    feather_ctx_free(ctx);
}

/* A packed file with channel scales into the comfy layout, which takes one scale per tensor:
 * requantised (with the warning), not repacked with scales ComfyUI would misread. */
TEST(convert_channel_scales_into_comfy_layout_are_requantised) {
    const char *in = test_path("m.safetensors"), *packed = test_path("p.safetensors"), *comfy = test_path("c.safetensors");
    REQUIRE(tu_write_model(in, small_model, NSMALL, 5, NULL) == 0);
    feather_ctx *ctx = feather_ctx_new(2);
    feather_convert_options o;
    feather_convert_defaults(&o); /* channel scales */
    feather_convert_result res;
    feather_error err = {0};
    REQUIRE(feather_convert(ctx, in, packed, &o, &res, &err) == FEATHER_OK);
    o.layout = FEATHER_LAYOUT_COMFY;
    o.quant.mode = FEATHER_SCALE_TENSOR;
    feather_status st = feather_convert(ctx, packed, comfy, &o, &res, &err);
    if (st) test_fail(__FILE__, __LINE__, "%s", err.message);
    REQUIRE(st == FEATHER_OK);
    CHECK(res.nwarnings == 1 && strstr(res.warnings[0], "3 quantised layers") && strstr(res.warnings[0], "requantised"));
    feather_reader *r;
    REQUIRE(feather_open(&r, comfy, 0, &err) == FEATHER_OK);
    for (size_t i = 0; i < feather_count(r); i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        const size_t len = strlen(t->name);
        if (len > 13 && !strcmp(t->name + len - 13, ".weight_scale")) CHECK(t->ndim == 0 && t->nelem == 1);
    }
    CHECK(feather_find(r, "blocks.0.mlp.fc1.weight_scale") != NULL);
    feather_close(r);
    feather_ctx_free(ctx);
}

/* Options for the comfy layout in e4m3fn with one scale per tensor. */
static void comfy_e4m3(feather_convert_options *o) {
    feather_convert_defaults(o);
    o->layout = FEATHER_LAYOUT_COMFY;
    o->quant.format = FEATHER_FP8_E4M3FN;
    o->quant.mode = FEATHER_SCALE_TENSOR;
}

/* small_model converted to the comfy layout in e4m3fn, at c4: an fp8 input as ComfyUI's tools
 * write them. */
static feather_status e4m3_input(feather_ctx *ctx, const char *c4, feather_error *err) {
    const char *in = test_path("m.safetensors");
    if (tu_write_model(in, small_model, NSMALL, 5, NULL)) return FEATHER_E_IO;
    feather_convert_options o;
    feather_convert_result res;
    comfy_e4m3(&o);
    return feather_convert(ctx, in, c4, &o, &res, err);
}

TEST(convert_e4m3_input_is_requantised_with_warning) {
    const char *c4 = test_path("c4.safetensors"), *out = test_path("o.safetensors");
    feather_ctx *ctx = feather_ctx_new(2);
    feather_convert_options o;
    feather_convert_result res;
    feather_error err = {0};
    REQUIRE(e4m3_input(ctx, c4, &err) == FEATHER_OK);
    feather_convert_defaults(&o);
    feather_status st = feather_convert(ctx, c4, out, &o, &res, &err);
    if (st) test_fail(__FILE__, __LINE__, "%s", err.message);
    REQUIRE(st == FEATHER_OK);
    CHECK_EQ_U(res.tensors_converted, 3);
    CHECK(res.nwarnings >= 1);
    CHECK_EQ_U(res.nwarnings, 1); /* one for all three layers */
    CHECK_STR_CONTAINS(res.warnings[0], "3 quantised layers (blocks.0.attn.qkv.weight: F8_E4M3, …) requantised to e5m2");
    feather_reader *r;
    REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
    CHECK(!feather_find(r, "blocks.0.mlp.fc1.comfy_quant"));
    CHECK(!feather_metadata_get(r, 0, "_quantization_metadata"));
    const feather_tensor *w = feather_find(r, "blocks.0.mlp.fc1.weight");
    CHECK(w && w->dtype == FEATHER_F8_E5M2 && w->ndim == 3);
    feather_close(r);
    feather_ctx_free(ctx);
}

/* An fp8 weight requantised into blocks that do not divide its rows (block:128 at K = 64) is
 * kept as a 16-bit one would be, dequantised to BF16 in the packed layout; the plan said it
 * would be requantised, and the conversion then failed. */
TEST(convert_fp8_input_blocks_that_do_not_divide_k) {
    const char *c4 = test_path("c4.safetensors"), *out = test_path("o.safetensors");
    feather_ctx *ctx = feather_ctx_new(2);
    feather_error err = {0};
    REQUIRE(e4m3_input(ctx, c4, &err) == FEATHER_OK);
    feather_convert_options o;
    feather_convert_result res;
    feather_convert_defaults(&o);
    o.quant.mode = FEATHER_SCALE_BLOCK;
    o.quant.group = 128;
    o.overwrite = 1;
    feather_status st = feather_convert(ctx, c4, out, &o, &res, &err);
    if (st) test_fail(__FILE__, __LINE__, "%s", err.message);
    REQUIRE(st == FEATHER_OK);
    CHECK_EQ_U(res.tensors_converted, 1);
    feather_reader *r;
    REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
    const feather_tensor *a = feather_find(r, "blocks.0.attn.qkv.weight"), *b = feather_find(r, "blocks.0.mlp.fc2.weight");
    CHECK(a && a->dtype == FEATHER_BF16 && a->ndim == 2);
    CHECK(b && b->dtype == FEATHER_F8_E5M2 && b->ndim == 3);
    feather_close(r);
    REQUIRE(test_run("'%s' --plan --scale block:128 '%s'", bin("feather-convert"), c4) == 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "K=64 is not a multiple of the block size 128");
    feather_ctx_free(ctx);
}

/* Converts in to out with o, which overwrites and keeps the layers ex[0] matches; a failure
 * fails the test with the library's message. */
static feather_status convert_excluding(feather_ctx *ctx, const char *in, const char *out, feather_convert_options *o,
                                        const char **ex, feather_convert_result *res) {
    feather_error err = {0};
    o->exclude = ex;
    o->nexclude = 1;
    o->overwrite = 1;
    const feather_status st = feather_convert(ctx, in, out, o, res, &err);
    if (st) test_fail(__FILE__, __LINE__, "%s", err.message);
    return st;
}

/* A feather file's record of a weight's original (feather.tensors) travels into the output
 * where it fits the weight; one whose shape is not the weight's is replaced by the weight's own
 * dtype and shape, so that the output verifies. */
TEST(convert_feather_input_records_that_do_not_fit) {
    const char *c4 = test_path("c4.safetensors"), *out = test_path("o.safetensors");
    feather_ctx *ctx = feather_ctx_new(2);
    feather_error err = {0};
    REQUIRE(e4m3_input(ctx, c4, &err) == FEATHER_OK);
    size_t len;
    uint8_t *b = tu_read_file(c4, &len);
    REQUIRE(b);
    uint64_t hl;
    memcpy(&hl, b, 8);
    static const char rec[] = "\\\"blocks.0.mlp.fc1.weight\\\":{\\\"dtype\\\":\\\"F16\\\",\\\"shape\\\":[128,64]";
    char *at = memmem(b + 8, hl, rec, sizeof rec - 1);
    REQUIRE(at);
    memcpy(at + sizeof rec - 4, "32", 2); /* [128,32] */
    FILE *f = fopen(c4, "wb");
    REQUIRE(f && fwrite(b, 1, len, f) == len && fclose(f) == 0);
    free(b);
    feather_convert_options o;
    feather_convert_result res;
    feather_convert_defaults(&o);
    o.overwrite = 1;
    feather_status st = feather_convert(ctx, c4, out, &o, &res, &err);
    if (st) test_fail(__FILE__, __LINE__, "%s", err.message);
    REQUIRE(st == FEATHER_OK);
    feather_reader *r;
    REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
    const char *t = feather_metadata_get(r, 0, "feather.tensors");
    CHECK_STR_CONTAINS(t, "\"blocks.0.mlp.fc1.weight\":{\"dtype\":\"F8_E4M3\",\"shape\":[128,64]}");
    CHECK_STR_CONTAINS(t, "\"blocks.0.attn.qkv.weight\":{\"dtype\":\"BF16\",\"shape\":[96,64]}");
    feather_close(r);
    REQUIRE(test_run("'%s' '%s'", bin("feather-verify"), out) == 0);
    feather_ctx_free(ctx);
}

/* An fp8 layer that is not converted (--exclude): in the comfy layout it is kept as it is, with
 * what ComfyUI needs to load it (its .comfy_quant tag and _quantization_metadata entry); in the
 * packed layout, whose loader runs such layers as plain weights without their scales, it becomes
 * BF16: bf16(fp8 code x scale), element for element, with no scale or tag left. */
TEST(convert_fp8_layer_not_converted) {
    const char *c4 = test_path("c4.safetensors"), *out = test_path("o.safetensors");
    feather_ctx *ctx = feather_ctx_new(2);
    feather_convert_options o;
    feather_convert_result res;
    feather_error err = {0};
    REQUIRE(e4m3_input(ctx, c4, &err) == FEATHER_OK);
    const char *ex[] = {"^blocks\\.0\\.mlp\\.fc1\\."};
    static const char *const layer[] = {"blocks.0.mlp.fc1.weight", "blocks.0.mlp.fc1.weight_scale",
                                        "blocks.0.mlp.fc1.comfy_quant"};
    for (int comfy = 0; comfy < 2; comfy++) {
        if (comfy) comfy_e4m3(&o);
        else feather_convert_defaults(&o);
        REQUIRE(convert_excluding(ctx, c4, out, &o, ex, &res) == FEATHER_OK);
        CHECK_EQ_U(res.tensors_converted, 2);
        CHECK(comfy || (res.nwarnings >= 1 && strstr(res.warnings[res.nwarnings - 1], "1 quantised layer not converted "
                                                                                       "(blocks.0.mlp.fc1.weight) dequantised to BF16")));
        feather_reader *r, *r4;
        REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
        REQUIRE(feather_open(&r4, c4, 0, &err) == FEATHER_OK);
        const void *d[3], *dw;
        for (int i = 0; i < 3; i++) REQUIRE(feather_tensor_data(r4, feather_find(r4, layer[i]), &d[i], &err) == FEATHER_OK);
        const feather_tensor *w4 = feather_find(r4, layer[0]), *w = feather_find(r, layer[0]);
        REQUIRE(w && feather_tensor_data(r, w, &dw, &err) == FEATHER_OK);
        const char *q = feather_metadata_get(r, 0, "_quantization_metadata");
        if (comfy) {
            for (int i = 0; i < 3; i++) {
                const feather_tensor *a = feather_find(r4, layer[i]), *b = feather_find(r, layer[i]);
                const void *db;
                REQUIRE(b && feather_tensor_data(r, b, &db, &err) == FEATHER_OK);
                CHECK(a->dtype == b->dtype && a->nbytes == b->nbytes && !memcmp(d[i], db, a->nbytes));
            }
            REQUIRE(q);
            CHECK_STR_CONTAINS(q, "\"blocks.0.mlp.fc1\":{\"format\":\"float8_e4m3fn\"}");
            CHECK_STR_CONTAINS(q, "\"blocks.0.attn.qkv\"");
        } else {
            CHECK(!feather_find(r, layer[1]) && !feather_find(r, layer[2]) && !q);
            REQUIRE(w->dtype == FEATHER_BF16 && w->ndim == 2 && w->shape[0] == w4->shape[0] && w->shape[1] == w4->shape[1]);
            float s; /* (the scale follows a tag of odd length: unaligned) */
            memcpy(&s, d[1], sizeof s);
            uint64_t bad = 0;
            for (uint64_t i = 0; i < w4->nelem; i++)
                bad += ((const uint16_t *)dw)[i] !=
                       feather_f32_to_bf16(feather_fp8_to_f32(((const uint8_t *)d[0])[i], FEATHER_FP8_E4M3FN) * s);
            CHECK_EQ_U(bad, 0);
        }
        feather_close(r);
        feather_close(r4);
    }
    feather_ctx_free(ctx);
}

/* An fp8 input whose scales fit no layout of its weight (by their shape: [2, 32] are as many as
 * the rows, not one per row), hold one that is not finite and > 0 (random N(0, 0.02) scales:
 * about half negative), or are not float scales (MXFP8's E8M0 ones, integers: they were taken
 * for NaN): one line, nothing written. */
TEST(convert_fp8_scales_that_fit_nothing_are_refused) {
    static const tspec t[] = {{"a.weight", FEATHER_F8_E5M2, 2, {64, 64}}, {"a.weight_scale", FEATHER_F32, 1, {5}},
                              {"b.weight", FEATHER_F8_E5M2, 2, {64, 64}}, {"b.weight_scale", FEATHER_F32, 1, {0}},
                              {"c.weight", FEATHER_F8_E5M2, 2, {64, 64}}, {"c.weight_scale", FEATHER_F32, 1, {64}},
                              {"d.weight", FEATHER_F8_E5M2, 2, {64, 64}}, {"d.weight_scale", FEATHER_F32, 2, {2, 32}},
                              {"e.weight", FEATHER_F8_E4M3, 2, {64, 64}}, {"e.weight_scale", FEATHER_F8_E8M0, 2, {64, 2}},
                              {"f.weight", FEATHER_F8_E5M2, 2, {64, 64}}, {"f.weight_scale", FEATHER_I32, 1, {1}}};
    static const struct { feather_status st; const char *why; } want[] = {
        {FEATHER_E_INVALID, "tensor 'a.weight_scale': scales [5] fit no scale layout of weight 'a.weight' [64, 64]"},
        {FEATHER_E_INVALID, "tensor 'b.weight_scale': scales [0] fit no scale layout of weight 'b.weight' [64, 64]"},
        {FEATHER_E_INVALID, "tensor 'c.weight_scale': scale "},
        {FEATHER_E_INVALID, "tensor 'd.weight_scale': scales [2, 32] fit no scale layout"},
        {FEATHER_E_UNSUPPORTED, "tensor 'e.weight_scale': F8_E8M0 scales [64, 2] of fp8 weight 'e.weight': feather reads F32, BF16 or F16"},
        {FEATHER_E_UNSUPPORTED, "tensor 'f.weight_scale': I32 scales [1] of fp8 weight 'f.weight': feather reads"}};
    feather_ctx *ctx = feather_ctx_new(1);
    for (int i = 0; i < 6; i++) {
        const char *in = test_path("bad.safetensors"), *out = test_path("bad-out.safetensors");
        REQUIRE(tu_write_model(in, t + 2 * i, 2, 1, NULL) == 0);
        feather_convert_options o;
        feather_convert_defaults(&o);
        feather_convert_result res;
        feather_error err = {0};
        CHECK(feather_convert(ctx, in, out, &o, &res, &err) == want[i].st);
        CHECK_STR_CONTAINS(err.message, want[i].why);
        if (i == 2) CHECK_STR_CONTAINS(err.message, "(must be finite and > 0)");
        CHECK(access(out, F_OK) != 0);
    }
    feather_ctx_free(ctx);
}

/* Writes an fp8 checkpoint of e4m3 weights [shape[i][0], shape[i][1]] whose scales cover blocks
 * of shape[i][2] rows by 128 columns, the last ones short: DeepSeek's X.weight_scale_inv
 * [ceil(N/128), ceil(K/128)] (128 rows), or compressed-tensors' group scales X.weight_scale
 * [N, ceil(K/128)] (1 row). Codes and scales chosen here: no NaN codes, every block its own
 * power-of-two scale. */
static int write_block_scaled(const char *path, const char *const *names, const uint64_t (*shape)[3], int nw) {
    feather_error err = {0};
    feather_writer *w;
    feather_write_options wo = {.no_hashes = 1, .overwrite = 1};
    if (feather_writer_open(&w, path, &wo, &err)) return -1;
    char sname[256];
    for (int i = 0; i < nw; i++) {
        const uint64_t ss[2] = {(shape[i][0] + shape[i][2] - 1) / shape[i][2], (shape[i][1] + 127) / 128};
        snprintf(sname, sizeof sname, "%s%s", names[i], shape[i][2] > 1 ? "_scale_inv" : "_scale");
        if (feather_writer_tensor(w, names[i], FEATHER_F8_E4M3, 2, shape[i], &err) ||
            feather_writer_tensor(w, sname, FEATHER_F32, 2, ss, &err))
            goto fail;
    }
    if (feather_writer_begin(w, &err)) goto fail;
    for (int i = 0; i < nw; i++) {
        const uint64_t nk = shape[i][0] * shape[i][1],
                       ns = ((shape[i][0] + shape[i][2] - 1) / shape[i][2]) * ((shape[i][1] + 127) / 128);
        uint8_t *q = malloc(nk);
        float *sc = malloc(ns * sizeof(float));
        if (!q || !sc) { free(q); free(sc); goto fail; }
        for (uint64_t j = 0; j < nk; j++) q[j] = (uint8_t)((j * 2654435761u >> 7) % 0x7e) | (uint8_t)(j & 0x80); /* no 0x7f, 0xff */
        for (uint64_t j = 0; j < ns; j++) sc[j] = ldexpf(1.0f, (int)(j % 9) - 6);
        const int bad = feather_writer_write(w, q, nk, &err) || feather_writer_write(w, sc, ns * sizeof(float), &err);
        free(q);
        free(sc);
        if (bad) goto fail;
    }
    return feather_writer_commit(w, &err) ? -1 : 0;
fail:
    feather_writer_abort(w);
    return -1;
}

/* An fp8 checkpoint with scales of 128 x 128 blocks (DeepSeek-V3, Qwen3-FP8, compressed-tensors'
 * block strategy), or of groups of 128 along the rows with a short last one (compressed-tensors'
 * group strategy at K = 400): each weight's scale tensor is found (under its _scale_inv name for
 * the blocks) and read by its shape, so a layer kept in BF16 is bf16(code x its block's scale) to
 * the bit, also where the scales are as many as the rows ([256, 16384]: [2, 128]); converted
 * layers are requantised (the packed layout's scales follow rows, in groups that divide K), the
 * input's scales dropped, and feather-verify measures them against the dequantised original. With
 * every layer excluded there is nothing to convert. */
TEST(convert_fp8_scales_of_128x128_blocks) {
    static const char *const names[] = {"model.layers.0.mlp.down_proj.weight", "model.layers.0.mlp.up_proj.weight",
                                        "model.layers.0.mlp.gate_proj.weight", "model.layers.0.self_attn.q_proj.weight"};
    static const uint64_t shape[][3] = {{200, 400, 128}, {256, 16384, 128}, {64, 400, 1}, {128, 256, 128}};
    const char *in = test_path("ds.safetensors"), *out = test_path("ds-out.safetensors");
    REQUIRE(write_block_scaled(in, names, shape, 4) == 0);
    feather_ctx *ctx = feather_ctx_new(2);
    feather_convert_options o;
    feather_convert_result res;
    feather_error err = {0};
    feather_convert_defaults(&o);
    const char *ex[] = {"mlp"};
    REQUIRE(convert_excluding(ctx, in, out, &o, ex, &res) == FEATHER_OK);
    feather_reader *r, *ri;
    REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
    REQUIRE(feather_open(&ri, in, 0, &err) == FEATHER_OK);
    for (int i = 0; i < 3; i++) {
        char sname[256];
        snprintf(sname, sizeof sname, "%s%s", names[i], shape[i][2] > 1 ? "_scale_inv" : "_scale");
        const feather_tensor *w = feather_find(r, names[i]), *wi = feather_find(ri, names[i]), *si = feather_find(ri, sname);
        REQUIRE(w && wi && si && w->dtype == FEATHER_BF16 && !feather_find(r, sname));
        const void *dw, *dq, *ds;
        REQUIRE(!feather_tensor_data(r, w, &dw, &err) && !feather_tensor_data(ri, wi, &dq, &err) &&
                !feather_tensor_data(ri, si, &ds, &err));
        const uint64_t n = shape[i][0], k = shape[i][1], cols = (k + 127) / 128;
        uint64_t bad = 0;
        for (uint64_t j = 0; j < n * k; j++) {
            const float s = ((const float *)ds)[(j / k / shape[i][2]) * cols + (j % k) / 128];
            bad += ((const uint16_t *)dw)[j] !=
                   feather_f32_to_bf16(feather_fp8_to_f32(((const uint8_t *)dq)[j], FEATHER_FP8_E4M3FN) * s);
        }
        if (bad) test_fail(__FILE__, __LINE__, "%s: %llu of %llu values differ", names[i], (unsigned long long)bad,
                           (unsigned long long)(n * k));
    }
    feather_close(r);
    feather_close(ri);
    /* every layer excluded: nothing to convert (their dropped scales are no conversion) */
    const char *all[] = {"."};
    o.exclude = all;
    CHECK(feather_convert(ctx, in, out, &o, &res, &err) == FEATHER_E_NOTHING);
    feather_ctx_free(ctx);
    /* converted: requantised into scales of rows, the blocks' scales dropped, measured by verify */
    REQUIRE(test_run("'%s' --plan '%s'", bin("feather-convert"), in) == 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "its scales of 128 x 128 blocks requantised to scales of its rows");
    CHECK_STR_CONTAINS(test_cmd_output(), "drop");
    REQUIRE(test_run("'%s' -q --force -o '%s' '%s'", bin("feather-convert"), out, in) == 0);
    REQUIRE(test_run("'%s' --reference '%s' '%s'", bin("feather-verify"), in, out) == 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "4 measured");
}

/* A requantised weight of many strips (the CPU requantises 16 rows of K = 8192 at a time, each
 * strip on one thread: here 32 strips and one of 8 rows) gets the codes and scales of the whole
 * weight dequantised and quantised at once (feather_quantize), in the packed layout with
 * channel, block:32 (without statistics, as -q converts, so with streaming stores) and tensor
 * scales, and in the plain one with none, tensor and absmax (one scale for the weight, found
 * from the strips in two passes). Values that are NaN once dequantised, in two strips, are
 * counted over the whole weight and refused in one line, with no output left. */
TEST(convert_requantised_in_strips_as_the_whole_weight) {
    static const char *const names[] = {"model.layers.0.mlp.down_proj.weight"};
    static const uint64_t shape[][3] = {{520, 8192, 128}};
    const uint64_t n = 520, k = 8192, cols = k / 128;
    const char *in = test_path("big.safetensors"), *out = test_path("big-out.safetensors");
    REQUIRE(write_block_scaled(in, names, shape, 1) == 0);
    feather_ctx *ctx = feather_ctx_new(2);
    feather_error err = {0};
    feather_reader *ri;
    REQUIRE(feather_open(&ri, in, 0, &err) == FEATHER_OK);
    const void *dq, *ds;
    REQUIRE(!feather_tensor_data(ri, feather_find(ri, names[0]), &dq, &err) &&
            !feather_tensor_data(ri, feather_find(ri, "model.layers.0.mlp.down_proj.weight_scale_inv"), &ds, &err));
    float *deq = malloc(n * k * sizeof(float)), *want_s = malloc(n * k / 32 * sizeof(float));
    uint8_t *want_q = malloc(n * k);
    REQUIRE(deq && want_s && want_q);
    for (uint64_t j = 0; j < n * k; j++)
        deq[j] = feather_fp8_to_f32(((const uint8_t *)dq)[j], FEATHER_FP8_E4M3FN) *
                 ((const float *)ds)[(j / k / 128) * cols + (j % k) / 128];
    feather_close(ri);
    static const struct {
        feather_scale_mode mode;
        unsigned group;
        feather_layout layout;
    } ways[] = {{FEATHER_SCALE_CHANNEL, 0, FEATHER_LAYOUT_PACKED}, {FEATHER_SCALE_BLOCK, 32, FEATHER_LAYOUT_PACKED},
                {FEATHER_SCALE_NONE, 0, FEATHER_LAYOUT_COMFY},     {FEATHER_SCALE_TENSOR, 0, FEATHER_LAYOUT_PACKED},
                {FEATHER_SCALE_TENSOR, 0, FEATHER_LAYOUT_COMFY},   {FEATHER_SCALE_ABSMAX, 0, FEATHER_LAYOUT_COMFY}};
    for (int w = 0; w < 6; w++) {
        feather_convert_options o;
        feather_convert_result res;
        feather_convert_defaults(&o);
        o.quant.mode = ways[w].mode;
        o.quant.group = ways[w].group;
        o.layout = ways[w].layout;
        o.device = FEATHER_DEVICE_CPU;
        o.overwrite = 1;
        o.no_snr = w == 1; /* without statistics the codes go out with streaming stores */
        const int packed = o.layout == FEATHER_LAYOUT_PACKED;
        feather_status st = feather_convert(ctx, in, out, &o, &res, &err);
        if (st) test_fail(__FILE__, __LINE__, "%s", err.message);
        REQUIRE(st == FEATHER_OK);
        feather_quant_options qo = o.quant;
        REQUIRE(feather_quantize(ctx, &qo, FEATHER_F32, deq, n, k, packed, want_q, want_s, NULL, &err) == FEATHER_OK);
        feather_reader *r;
        REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
        const feather_tensor *t = feather_find(r, names[0]),
                             *s = feather_find(r, "model.layers.0.mlp.down_proj.weight_scale");
        const uint64_t ns = feather_scale_count(&qo, n, k);
        REQUIRE(t && t->nbytes == n * k && (ways[w].mode == FEATHER_SCALE_NONE || (s && s->nbytes == ns * 4)));
        const void *got_q, *got_s = NULL;
        REQUIRE(!feather_tensor_data(r, t, &got_q, &err) && (!s || !feather_tensor_data(r, s, &got_s, &err)));
        CHECK(memcmp(got_q, want_q, n * k) == 0);
        if (got_s) CHECK(memcmp(got_s, want_s, ns * 4) == 0);
        feather_close(r);
    }
    /* NaN codes in the first and last bands */
    uint8_t *bytes;
    size_t len;
    REQUIRE((bytes = tu_read_file(in, &len)) != NULL);
    uint64_t hl;
    memcpy(&hl, bytes, 8);
    bytes[8 + hl + 5] = 0x7f;
    bytes[8 + hl + 515 * k + 9] = 0xff;
    FILE *f = fopen(in, "wb");
    REQUIRE(f && fwrite(bytes, 1, len, f) == len && fclose(f) == 0);
    free(bytes);
    unlink(out);
    for (int t = 0; t < 2; t++) {
        REQUIRE(test_run("'%s' -q --device cpu --scale %s -o '%s' '%s'", bin("feather-convert"), t ? "tensor" : "channel",
                         out, in) == 2);
        CHECK_STR_CONTAINS(test_cmd_output(),
                           "tensor 'model.layers.0.mlp.down_proj.weight': 2 NaN/Inf values once dequantised");
        CHECK(!exists(out));
    }
    free(deq);
    free(want_s);
    free(want_q);
    feather_ctx_free(ctx);
}

/* A layer quantised in a format feather does not read (int8 codes with their row scales, as
 * ComfyUI's int8_tensorwise) is kept as it is, with a warning in the packed layout, whose loader
 * would run it as a plain weight; the comfy layout's loader reads it by its tag: no warning
 * there. */
TEST(convert_warns_of_layers_in_other_quantised_formats) {
    static const tspec t[] = {{"a.weight", FEATHER_I8, 2, {64, 64}}, {"a.weight_scale", FEATHER_F32, 2, {64, 1}},
                              {"b.weight", FEATHER_BF16, 2, {64, 64}}};
    const char *in = test_path("int8.safetensors"), *out = test_path("int8-out.safetensors");
    REQUIRE(tu_write_model(in, t, 3, 1, NULL) == 0);
    feather_ctx *ctx = feather_ctx_new(1);
    for (int comfy = 0; comfy < 2; comfy++) {
        feather_convert_options o;
        feather_convert_defaults(&o);
        o.overwrite = 1;
        if (comfy) {
            o.layout = FEATHER_LAYOUT_COMFY;
            o.quant.mode = FEATHER_SCALE_TENSOR;
        }
        feather_convert_result res;
        feather_error err = {0};
        feather_status st = feather_convert(ctx, in, out, &o, &res, &err);
        if (st) test_fail(__FILE__, __LINE__, "%s", err.message);
        REQUIRE(st == FEATHER_OK);
        CHECK_EQ_U(res.tensors_converted, 1);
        int warned = 0;
        for (int i = 0; i < res.nwarnings; i++)
            warned |= strstr(res.warnings[i], "1 layer quantised in a format feather does not read (a.weight: I8)") != NULL;
        CHECK(warned == !comfy);
    }
    feather_ctx_free(ctx);
}

/* ComfyUI's MXFP8 and NVFP4 layers: an MXFP8 weight, F8_E4M3 [256, 256] with E8M0 scales per
 * 32 values ([256, 8], tagged by _quantization_metadata), and an NVFP4 one, U8 [144, 144] codes
 * of [144, 288] values with E4M3 scales per 16 ([256, 20]: rows and groups padded) and an F32
 * tensor scale (tagged by its comfy_quant tensor). Both store their block scales in cuBLAS's
 * tiles. Scale (r, c) of a tile sits at (r % 32) · 16 + (r % 128 / 32) · 4 + c % 4. */
#define MX_N 256
#define MX_K 256
#define NV_N 144
#define NV_K 288
static uint64_t tile_at(uint64_t r, uint64_t c, uint64_t cols) {
    return ((r / 128) * (cols / 4) + c / 4) * 512 + (r % 32) * 16 + (r % 128 / 32) * 4 + c % 4;
}

/* tagged: 0, no tag for the MXFP8 layer; 1, as above; 2, both layers tagged in
 * _quantization_metadata (no comfy_quant tensor). u8: both block scales stored as U8 bytes, as
 * older ComfyUI files hold them. */
static int write_mx_nv(const char *path, int tagged, int u8, float g) {
    static const uint64_t mxs[2] = {MX_N, MX_K}, mxss[2] = {MX_N, MX_K / 32}, nvs[2] = {NV_N, NV_K / 2},
                          nvss[2] = {256, 20}, tag_len[1] = {sizeof "{\"format\": \"nvfp4\"}" - 1};
    feather_error err = {0};
    feather_writer *w;
    feather_write_options wo = {.no_hashes = 1, .overwrite = 1};
    if (feather_writer_open(&w, path, &wo, &err)) return -1;
    uint8_t *mq = malloc(MX_N * MX_K), *ms = calloc(MX_N * MX_K / 32, 1), *nq = malloc(NV_N * NV_K / 2),
            *ns = calloc(256 * 20, 1);
    uint16_t plain[64 * 64]; /* a BF16 layer beside them */
    for (int j = 0; j < 64 * 64; j++) plain[j] = feather_f32_to_bf16((float)(j % 7 - 3));
    int st = !mq || !ms || !nq || !ns;
    for (uint64_t j = 0; !st && j < MX_N * MX_K; j++) mq[j] = (uint8_t)((j * 2654435761u >> 7) % 0x7e) | (uint8_t)(j & 0x80);
    for (uint64_t r = 0; !st && r < MX_N; r++)
        for (uint64_t c = 0; c < MX_K / 32; c++) ms[tile_at(r, c, MX_K / 32)] = (uint8_t)(120 + (r * 7 + c * 3) % 13);
    for (uint64_t j = 0; !st && j < NV_N * NV_K / 2; j++) nq[j] = (uint8_t)(j * 2654435761u >> 9);
    for (uint64_t r = 0; !st && r < NV_N; r++) /* E4M3 codes 0x08 … 0x5f: 2^-6 … 22; block (5, 3) is 0 */
        for (uint64_t c = 0; c < NV_K / 16; c++) ns[tile_at(r, c, 20)] = r == 5 && c == 3 ? 0 : (uint8_t)(8 + (r * 5 + c * 11) % 88);
    if (tagged)
        st = st || feather_writer_metadata(w, "_quantization_metadata",
                                          tagged == 1 ? "{\"format_version\": \"1.0\", \"layers\": {\"blocks.0.attn.qkv\": "
                                                        "{\"format\": \"mxfp8\"}}}"
                                                      : "{\"format_version\": \"1.0\", \"layers\": {\"blocks.0.attn.qkv\": "
                                                        "{\"format\": \"mxfp8\"}, \"blocks.0.mlp.fc1\": {\"format\": \"nvfp4\"}}}",
                                          &err);
    st = st || feather_writer_tensor(w, "blocks.0.attn.qkv.weight", FEATHER_F8_E4M3, 2, mxs, &err) ||
         feather_writer_tensor(w, "blocks.0.attn.qkv.weight_scale", u8 ? FEATHER_U8 : FEATHER_F8_E8M0, 2, mxss, &err) ||
         feather_writer_tensor(w, "blocks.0.mlp.fc1.weight", FEATHER_U8, 2, nvs, &err) ||
         feather_writer_tensor(w, "blocks.0.mlp.fc1.weight_scale", u8 ? FEATHER_U8 : FEATHER_F8_E4M3, 2, nvss, &err) ||
         feather_writer_tensor(w, "blocks.0.mlp.fc1.weight_scale_2", FEATHER_F32, 0, nvs, &err) ||
         (tagged != 2 && feather_writer_tensor(w, "blocks.0.mlp.fc1.comfy_quant", FEATHER_U8, 1, tag_len, &err)) ||
         feather_writer_tensor(w, "blocks.0.proj.weight", FEATHER_BF16, 2, (const uint64_t[2]){64, 64}, &err) ||
         feather_writer_tensor(w, "blocks.0.mlp.fc1.input_scale", FEATHER_F32, 0, nvs, &err) ||
         feather_writer_begin(w, &err) ||
         feather_writer_write(w, mq, MX_N * MX_K, &err) || feather_writer_write(w, ms, MX_N * MX_K / 32, &err) ||
         feather_writer_write(w, nq, NV_N * NV_K / 2, &err) || feather_writer_write(w, ns, 256 * 20, &err) ||
         feather_writer_write(w, &g, 4, &err) ||
         (tagged != 2 && feather_writer_write(w, "{\"format\": \"nvfp4\"}", tag_len[0], &err)) ||
         feather_writer_write(w, plain, sizeof plain, &err) || feather_writer_write(w, &g, 4, &err);
    free(mq);
    free(ms);
    free(nq);
    free(ns);
    if (st) {
        feather_writer_abort(w);
        return -1;
    }
    return feather_writer_commit(w, &err) ? -1 : 0;
}

/* The values each layer holds, worked out here from the codes and the scales' tiles. */
static float mx_nv_value(const uint8_t *q, const uint8_t *sc, int nv, float g, uint64_t r, uint64_t c) {
    static const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    if (!nv) return feather_fp8_to_f32(q[r * MX_K + c], FEATHER_FP8_E4M3FN) * ldexpf(1.0f, sc[tile_at(r, c / 32, MX_K / 32)] - 127);
    const uint8_t code = c % 2 ? q[r * NV_K / 2 + c / 2] & 15 : q[r * NV_K / 2 + c / 2] >> 4;
    const double v = e2m1[code & 7] * feather_fp8_to_f32(sc[tile_at(r, c / 16, 20)], FEATHER_FP8_E4M3FN) * (double)g;
    return (float)(code & 8 ? -v : v);
}

/* The two layers kept in the packed layout: BF16 of their values to the bit, their scales, tags
 * and the NVFP4 layer's activation scale dropped. */
static void check_mx_nv_kept(const char *in, const char *out, float g) {
    static const char *const in_names[] = {"blocks.0.attn.qkv.weight", "blocks.0.mlp.fc1.weight"};
    feather_error err = {0};
    feather_reader *r, *ri;
    REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
    REQUIRE(feather_open(&ri, in, 0, &err) == FEATHER_OK);
    CHECK(!feather_find(r, "blocks.0.attn.qkv.weight_scale") && !feather_find(r, "blocks.0.mlp.fc1.weight_scale") &&
          !feather_find(r, "blocks.0.mlp.fc1.weight_scale_2") && !feather_find(r, "blocks.0.mlp.fc1.comfy_quant") &&
          !feather_find(r, "blocks.0.mlp.fc1.input_scale"));
    for (int nv = 0; nv < 2; nv++) {
        const uint64_t n = nv ? NV_N : MX_N, k = nv ? NV_K : MX_K;
        char sname[128];
        snprintf(sname, sizeof sname, "%s_scale", in_names[nv]);
        const feather_tensor *w = feather_find(r, in_names[nv]), *wi = feather_find(ri, in_names[nv]), *si = feather_find(ri, sname);
        REQUIRE(w && wi && si && w->dtype == FEATHER_BF16 && w->shape[0] == n && w->shape[1] == k);
        const void *dw, *dq, *ds;
        REQUIRE(!feather_tensor_data(r, w, &dw, &err) && !feather_tensor_data(ri, wi, &dq, &err) &&
                !feather_tensor_data(ri, si, &ds, &err));
        uint64_t bad = 0, zeros = 0;
        for (uint64_t j = 0; j < n * k; j++) {
            const float v = mx_nv_value(dq, ds, nv, g, j / k, j % k);
            bad += ((const uint16_t *)dw)[j] != feather_f32_to_bf16(v);
            zeros += v == 0;
        }
        if (bad) test_fail(__FILE__, __LINE__, "%s: %llu of %llu values differ", in_names[nv], (unsigned long long)bad,
                           (unsigned long long)(n * k));
        CHECK(zeros < n * k / 4);
    }
    feather_close(r);
    feather_close(ri);
}

/* Both are read, with their block scales as 8-bit floats or as U8 bytes: kept in the packed
 * layout they are BF16 of their values to the bit, their scales, tags and the NVFP4 layer's
 * activation scale dropped; converted they are requantised and feather-verify measures them against
 * those values; in the comfy layout a kept one stays as it is. E8M0 scales without ComfyUI's
 * mxfp8 tag (row order, for other writers) are refused with exit 2. */
TEST(convert_comfy_mxfp8_and_nvfp4_layers) {
    const char *in = test_path("mxnv.safetensors"), *out = test_path("mxnv-out.safetensors");
    const float g = 0.0123f;
    feather_ctx *ctx = feather_ctx_new(2);
    feather_convert_options o;
    feather_convert_result res;
    feather_error err = {0};
    feather_convert_defaults(&o);
    const char *ex[] = {"qkv|fc1"};
    /* the block scales as U8 bytes, and both tags in the header, read the same */
    for (int v = 0; v < 3; v++) {
        REQUIRE(write_mx_nv(in, v == 1 ? 2 : 1, v == 0, g) == 0);
        REQUIRE(convert_excluding(ctx, in, out, &o, ex, &res) == FEATHER_OK);
        check_mx_nv_kept(in, out, g);
    }
    feather_reader *r;
    /* NVFP4 at block:16 keeps its blocks: every value but for the scales' rounding to f32 */
    o.quant.mode = FEATHER_SCALE_BLOCK;
    o.quant.group = 16;
    ex[0] = "qkv|proj";
    REQUIRE(feather_convert(ctx, in, out, &o, &res, &err) == FEATHER_OK);
    CHECK_EQ_U(res.tensors_converted, 1);
    if (!(res.snr_worst_db > 130)) test_fail(__FILE__, __LINE__, "NVFP4 at block:16: SNR %.1f dB", res.snr_worst_db);
    CHECK(res.nwarnings == 1 && !strstr(res.warnings[0], "rounding errors add up")); /* qkv's dequantisation */
    o.quant.group = 32;
    REQUIRE(feather_convert(ctx, in, out, &o, &res, &err) == FEATHER_OK);
    CHECK(res.snr_worst_db < 60 && res.nwarnings == 2 && strstr(res.warnings[0], "(blocks.0.mlp.fc1.weight: U8) requantised") &&
          strstr(res.warnings[0], "add up (NVFP4 and MXFP4 layers keep their own blocks at --scale block:16)"));
    /* the comfy layout keeps them as they are, with their scales and tags, a tag in the header
     * too */
    ex[0] = "qkv|fc1";
    o.layout = FEATHER_LAYOUT_COMFY;
    o.quant.mode = FEATHER_SCALE_TENSOR;
    for (int tagged = 1; tagged < 3; tagged++) {
        REQUIRE(write_mx_nv(in, tagged, 0, g) == 0);
        REQUIRE(feather_convert(ctx, in, out, &o, &res, &err) == FEATHER_OK);
        REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
        const feather_tensor *kept = feather_find(r, "blocks.0.mlp.fc1.weight"),
                             *ks = feather_find(r, "blocks.0.attn.qkv.weight_scale");
        const char *qm = feather_metadata_get(r, 0, "_quantization_metadata");
        CHECK(kept && kept->dtype == FEATHER_U8 && feather_find(r, "blocks.0.mlp.fc1.weight_scale_2") &&
              feather_find(r, "blocks.0.mlp.fc1.input_scale") && ks && ks->dtype == FEATHER_F8_E8M0);
        CHECK(tagged == 2 || feather_find(r, "blocks.0.mlp.fc1.comfy_quant"));
        CHECK_STR_CONTAINS(qm ? qm : "", "\"blocks.0.attn.qkv\":{\"format\":\"mxfp8\"}");
        if (tagged == 2) CHECK_STR_CONTAINS(qm ? qm : "", "\"blocks.0.mlp.fc1\":{\"format\":\"nvfp4\"}");
        feather_close(r);
    }
    REQUIRE(write_mx_nv(in, 1, 0, g) == 0);
    feather_ctx_free(ctx);
    /* converted, and measured against their values */
    REQUIRE(test_run("'%s' --plan '%s'", bin("feather-convert"), in) == 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "its MXFP8 block scales requantised to scales of its rows");
    CHECK_STR_CONTAINS(test_cmd_output(), "NVFP4 [144, 144]: requantised to e5m2 (error adds up; none at block:16)");
    CHECK_STR_CONTAINS(test_cmd_output(), "activation scale of blocks.0.mlp.fc1.weight, for the format it leaves");
    REQUIRE(test_run("'%s' -q --force -o '%s' '%s'", bin("feather-convert"), out, in) == 0);
    REQUIRE(test_run("'%s' --reference '%s' '%s'", bin("feather-verify"), in, out) == 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "3 measured");
    /* untagged E8M0 scales: no way to tell their order */
    REQUIRE(write_mx_nv(in, 0, 0, g) == 0);
    CHECK_EQ_U(test_run("'%s' -q --force -o '%s' '%s'", bin("feather-convert"), out, in), 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "'blocks.0.attn.qkv.weight_scale': F8_E8M0 scales [256, 8] of fp8 weight");
    /* a negative block scale (E4M3 0xb8, -1) */
    REQUIRE(write_mx_nv(in, 1, 0, g) == 0);
    {
        feather_reader *rb;
        feather_error e2 = {0};
        REQUIRE(feather_open(&rb, in, FEATHER_OPEN_HEADER_ONLY, &e2) == FEATHER_OK);
        const uint64_t at = 8 + feather_shard_header_len(rb, 0) + feather_find(rb, "blocks.0.mlp.fc1.weight_scale")->begin +
                            tile_at(2, 1, 20);
        feather_close(rb);
        FILE *f = fopen(in, "r+b");
        REQUIRE(f && fseek(f, (long)at, SEEK_SET) == 0 && fputc(0xb8, f) == 0xb8 && fclose(f) == 0);
    }
    CHECK_EQ_U(test_run("'%s' -q --force -o '%s' '%s'", bin("feather-convert"), out, in), 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "'blocks.0.mlp.fc1.weight_scale': scale 33 is -1 (must be finite and not negative)");
    /* a tensor scale that dequantises nothing */
    REQUIRE(write_mx_nv(in, 1, 0, -1.0f) == 0);
    CHECK_EQ_U(test_run("'%s' -q --force -o '%s' '%s'", bin("feather-convert"), out, in), 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "blocks.0.mlp.fc1.weight_scale_2': tensor scale -1");
}

/* Writes three float weights behind a U8 tensor of pad bytes: with pad = 3 none of them sits at
 * an address its element size divides, as MLX and writers before 2023 lay tensors out. */
static int write_behind_pad(const char *path, unsigned pad) {
    static const char *const names[] = {"a.weight", "b.weight", "c.weight"};
    static const feather_dtype dts[] = {FEATHER_BF16, FEATHER_F16, FEATHER_F32};
    static const uint64_t shapes[][2] = {{256, 1024}, {72, 208}, {64, 96}};
    feather_error err = {0};
    feather_writer *w;
    feather_write_options wo = {.no_hashes = 1, .overwrite = 1};
    if (feather_writer_open(&w, path, &wo, &err)) return -1;
    const uint8_t zeros[8] = {0};
    int st = feather_writer_tensor(w, "pad", FEATHER_U8, 1, (const uint64_t[1]){pad}, &err);
    for (int t = 0; t < 3 && !st; t++) st = feather_writer_tensor(w, names[t], dts[t], 2, shapes[t], &err);
    st = st || feather_writer_begin(w, &err) || feather_writer_write(w, zeros, pad, &err);
    uint64_t seed = 5;
    for (int t = 0; t < 3 && !st; t++)
        for (uint64_t i = 0; i < shapes[t][0] * shapes[t][1] && !st; i++) {
            const float v = (float)(tu_normal(&seed) * 0.02);
            const uint16_t h = dts[t] == FEATHER_BF16 ? feather_f32_to_bf16(v) : feather_f32_to_f16(v);
            st = dts[t] == FEATHER_F32 ? feather_writer_write(w, &v, 4, &err) : feather_writer_write(w, &h, 2, &err);
        }
    if (st) {
        feather_writer_abort(w);
        return -1;
    }
    return feather_writer_commit(w, &err) ? -1 : 0;
}

/* Weights at unaligned addresses convert to the same bytes as aligned ones, in every scale mode
 * (what the sanitizer build checks is that no load from them is a typed one). */
TEST(convert_unaligned_tensors) {
    const char *al = test_path("aligned.safetensors"), *un = test_path("unaligned.safetensors"),
               *oa = test_path("aligned-out.safetensors"), *ou = test_path("unaligned-out.safetensors");
    REQUIRE(write_behind_pad(al, 8) == 0 && write_behind_pad(un, 3) == 0);
    static const struct { feather_scale_mode mode; unsigned group; } modes[] = {
        {FEATHER_SCALE_NONE, 0}, {FEATHER_SCALE_ABSMAX, 0}, {FEATHER_SCALE_TENSOR, 0},
        {FEATHER_SCALE_CHANNEL, 0}, {FEATHER_SCALE_BLOCK, 16}};
    feather_ctx *ctx = feather_ctx_new(2);
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        feather_convert_options o;
        feather_convert_result res;
        feather_error err = {0};
        feather_convert_defaults(&o);
        o.overwrite = 1;
        o.preset = "none";
        o.quant.mode = modes[m].mode;
        o.quant.group = modes[m].group;
        REQUIRE(feather_convert(ctx, al, oa, &o, &res, &err) == FEATHER_OK);
        REQUIRE(feather_convert(ctx, un, ou, &o, &res, &err) == FEATHER_OK);
        CHECK_EQ_U(res.tensors_converted, 3);
        feather_reader *ra, *ru;
        REQUIRE(feather_open(&ra, oa, 0, &err) == FEATHER_OK && feather_open(&ru, ou, 0, &err) == FEATHER_OK);
        for (size_t i = 0; i < feather_count(ra); i++) {
            const feather_tensor *ta = feather_tensor_at(ra, i), *tu = feather_find(ru, ta->name);
            const void *da, *du;
            if (!strcmp(ta->name, "pad")) continue;
            REQUIRE(tu && tu->nbytes == ta->nbytes && !feather_tensor_data(ra, ta, &da, &err) &&
                    !feather_tensor_data(ru, tu, &du, &err));
            if (memcmp(da, du, ta->nbytes)) test_fail(__FILE__, __LINE__, "mode %zu: %s differs", m, ta->name);
        }
        feather_close(ra);
        feather_close(ru);
    }
    feather_ctx_free(ctx);
}

/* NVFP4 as NVIDIA's ModelOpt writes it, without a ComfyUI tag: U8 [N, K/2] codes with the even
 * column in the low nibble, E4M3 block scales [N, K/16] in row order, an F32 tensor scale and an
 * activation scale. Kept in the packed layout it is BF16 of its values to the bit (worked out
 * here), its scales dropped; converted, feather-verify measures it against them. With block
 * scales of another shape it is no layout feather knows, and is kept with a warning. */
TEST(convert_modelopt_nvfp4_layers) {
    enum { N = 96, K = 160 };
    const char *in = test_path("mo.safetensors"), *out = test_path("mo-out.safetensors");
    const float g = 0.0377f;
    uint8_t q[N * K / 2], sc[N * K / 16];
    uint16_t plain[64 * 64];
    for (int j = 0; j < N * K / 2; j++) q[j] = (uint8_t)((unsigned)j * 2654435761u >> 11);
    for (int j = 0; j < N * K / 16; j++) sc[j] = j == 5 ? 0 : (uint8_t)(8 + (j * 13) % 96); /* block 5: zeros */
    for (int j = 0; j < 64 * 64; j++) plain[j] = feather_f32_to_bf16((float)(j % 5 - 2));
    for (int bad = 1; bad >= 0; bad--) {
        feather_error err = {0};
        feather_writer *w;
        feather_write_options wo = {.no_hashes = 1, .overwrite = 1};
        REQUIRE(feather_writer_open(&w, in, &wo, &err) == FEATHER_OK);
        const int st = feather_writer_tensor(w, "l.weight", FEATHER_U8, 2, (const uint64_t[2]){N, K / 2}, &err) ||
                       feather_writer_tensor(w, "l.weight_scale", FEATHER_F8_E4M3, 2,
                                             bad ? (const uint64_t[2]){N / 2, K / 8} : (const uint64_t[2]){N, K / 16}, &err) ||
                       feather_writer_tensor(w, "l.weight_scale_2", FEATHER_F32, 0, (const uint64_t[1]){0}, &err) ||
                       feather_writer_tensor(w, "l.input_scale", FEATHER_F32, 0, (const uint64_t[1]){0}, &err) ||
                       feather_writer_tensor(w, "p.weight", FEATHER_BF16, 2, (const uint64_t[2]){64, 64}, &err) ||
                       feather_writer_begin(w, &err) || feather_writer_write(w, q, sizeof q, &err) ||
                       feather_writer_write(w, sc, sizeof sc, &err) || feather_writer_write(w, &g, 4, &err) ||
                       feather_writer_write(w, &g, 4, &err) || feather_writer_write(w, plain, sizeof plain, &err) ||
                       feather_writer_commit(w, &err);
        REQUIRE(!st);
        if (bad) { /* not ModelOpt's layout: a format feather does not read, kept as it is */
            CHECK_EQ_U(test_run("'%s' --force -o '%s' '%s'", bin("feather-convert"), out, in), 0);
            CHECK_STR_CONTAINS(test_cmd_output(), "1 layer quantised in a format feather does not read (l.weight: U8)");
        }
    }
    feather_ctx *ctx = feather_ctx_new(2);
    feather_convert_options o;
    feather_convert_result res;
    feather_convert_defaults(&o);
    const char *ex[] = {"^l\\."};
    REQUIRE(convert_excluding(ctx, in, out, &o, ex, &res) == FEATHER_OK);
    feather_ctx_free(ctx);
    feather_error err = {0};
    feather_reader *r;
    REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
    const feather_tensor *t = feather_find(r, "l.weight");
    const void *d;
    REQUIRE(t && t->dtype == FEATHER_BF16 && t->shape[0] == N && t->shape[1] == K && !feather_tensor_data(r, t, &d, &err));
    CHECK(!feather_find(r, "l.weight_scale") && !feather_find(r, "l.weight_scale_2") && !feather_find(r, "l.input_scale"));
    static const double e2m1[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    int differ = 0;
    for (int j = 0; j < N * K; j++) {
        const int code = j % 2 ? q[j / 2] >> 4 : q[j / 2] & 15, row = j / K, col = j % K;
        const double v = e2m1[code & 7] * feather_fp8_to_f32(sc[row * (K / 16) + col / 16], FEATHER_FP8_E4M3FN) * (double)g;
        differ += ((const uint16_t *)d)[j] != feather_f32_to_bf16((float)(code & 8 ? -v : v));
    }
    feather_close(r);
    if (differ) test_fail(__FILE__, __LINE__, "%d of %d values differ", differ, N * K);
    REQUIRE(test_run("'%s' --plan '%s'", bin("feather-convert"), in) == 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "NVFP4 [96, 80]: requantised to e5m2");
    REQUIRE(test_run("'%s' -q --force -o '%s' '%s'", bin("feather-convert"), out, in) == 0);
    REQUIRE(test_run("'%s' --reference '%s' '%s'", bin("feather-verify"), in, out) == 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "2 measured");
}

enum { CT_N = 96, CT_K = 160 };

/* compressed-tensors' layers m.a (NVFP4: block scales E4M3 [N, K/16], a global scale g that divides
 * them, an activation global scale) and m.b (MXFP4: E8M0 bytes [N, K/32]), codes in
 * X.weight_packed, beside a BF16 layer m.p; clash: a tensor m.a.weight as well. */
static int write_ct(const char *path, const uint8_t (*q)[CT_N * CT_K / 2], const uint8_t *nvs, const uint8_t *mxs, float g,
                    int clash) {
    static const uint64_t qs[2] = {CT_N, CT_K / 2}, one[1] = {1};
    uint16_t plain[64 * 64];
    for (int j = 0; j < 64 * 64; j++) plain[j] = feather_f32_to_bf16((float)(j % 3 - 1));
    feather_error err = {0};
    feather_writer *w;
    feather_write_options wo = {.no_hashes = 1, .overwrite = 1};
    if (feather_writer_open(&w, path, &wo, &err)) return -1;
    const int st = feather_writer_tensor(w, "m.a.weight_packed", FEATHER_U8, 2, qs, &err) ||
                   feather_writer_tensor(w, "m.a.weight_scale", FEATHER_F8_E4M3, 2, (const uint64_t[2]){CT_N, CT_K / 16}, &err) ||
                   feather_writer_tensor(w, "m.a.weight_global_scale", FEATHER_F32, 1, one, &err) ||
                   feather_writer_tensor(w, "m.a.input_global_scale", FEATHER_F32, 1, one, &err) ||
                   feather_writer_tensor(w, "m.b.weight_packed", FEATHER_U8, 2, qs, &err) ||
                   feather_writer_tensor(w, "m.b.weight_scale", FEATHER_U8, 2, (const uint64_t[2]){CT_N, CT_K / 32}, &err) ||
                   feather_writer_tensor(w, clash ? "m.a.weight" : "m.p.weight", FEATHER_BF16, 2, (const uint64_t[2]){64, 64}, &err) ||
                   feather_writer_begin(w, &err) || feather_writer_write(w, q[0], sizeof q[0], &err) ||
                   feather_writer_write(w, nvs, CT_N * CT_K / 16, &err) || feather_writer_write(w, &g, 4, &err) ||
                   feather_writer_write(w, &g, 4, &err) || feather_writer_write(w, q[1], sizeof q[1], &err) ||
                   feather_writer_write(w, mxs, CT_N * CT_K / 32, &err) || feather_writer_write(w, plain, sizeof plain, &err);
    if (st) {
        feather_writer_abort(w);
        return -1;
    }
    return feather_writer_commit(w, &err) ? -1 : 0;
}

/* Value j of layer m.a (mx = 0) or m.b, as compressed-tensors computes it: the even column in the
 * low nibble, code × (block scale / g) in f32. */
static float ct_value(const uint8_t *q, const uint8_t *nvs, const uint8_t *mxs, float g, int mx, int j) {
    static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    const int code = j % 2 ? q[j / 2] >> 4 : q[j / 2] & 15, row = j / CT_K, col = j % CT_K;
    const float s = mx ? ldexpf(1.0f, mxs[row * (CT_K / 32) + col / 32] - 127)
                       : feather_fp8_to_f32(nvs[row * (CT_K / 16) + col / 16], FEATHER_FP8_E4M3FN) / g;
    const float v = e2m1[code & 7] * s;
    return code & 8 ? -v : v;
}

/* How many values of layers m.a and m.b in out differ from compressed-tensors' (BF16 of them
 * where dequantised; exactly, once the codes are dequantised, where converted at block:G). */
static uint64_t ct_differ(const char *out, const uint8_t (*q)[CT_N * CT_K / 2], const uint8_t *nvs, const uint8_t *mxs,
                          float g, int mx, unsigned group) {
    feather_error err = {0};
    feather_reader *r;
    if (feather_open(&r, out, 0, &err)) return UINT64_MAX;
    const feather_tensor *t = feather_find(r, mx ? "m.b.weight" : "m.a.weight"),
                         *ts = feather_find(r, mx ? "m.b.weight_scale" : "m.a.weight_scale");
    const void *d, *ds;
    float *v = malloc(CT_N * CT_K * sizeof(float)), *sc = malloc(CT_N * CT_K / 16 * sizeof(float));
    uint64_t differ = UINT64_MAX;
    if (t && v && sc && !feather_tensor_data(r, t, &d, &err)) {
        if (group) {
            if (ts && ts->nelem == (uint64_t)CT_N * CT_K / group && !feather_tensor_data(r, ts, &ds, &err)) {
                memcpy(sc, ds, ts->nbytes);
                feather_dequantize(d, 1, FEATHER_FP8_E5M2, FEATHER_SCALE_BLOCK, group, sc, CT_N, CT_K, v);
                differ = 0;
                for (int j = 0; j < CT_N * CT_K; j++) differ += v[j] != ct_value(q[mx], nvs, mxs, g, mx, j);
            }
        } else if (t->dtype == FEATHER_BF16 && t->shape[0] == CT_N && t->shape[1] == CT_K) {
            differ = 0;
            for (int j = 0; j < CT_N * CT_K; j++)
                differ += ((const uint16_t *)d)[j] != feather_f32_to_bf16(ct_value(q[mx], nvs, mxs, g, mx, j));
        }
    }
    free(v);
    free(sc);
    feather_close(r);
    return differ;
}

/* compressed-tensors' NVFP4 and MXFP4 layers are read, and written as X.weight: kept in the packed
 * layout, BF16 of their values to the bit; converted at block:16 (and MXFP4 at block:32) every value
 * exactly as compressed-tensors dequantises it, a block of zeros too; their scales, global scales
 * and activation global scale dropped; feather-verify measures against them and misses none of the
 * original's tensors. A file that holds X.weight beside X.weight_packed is refused. */
TEST(convert_compressed_tensors_fp4_layers) {
    const char *in = test_path("ct.safetensors"), *out = test_path("ct-out.safetensors");
    const float g = 448.0f * 6 / 2.9f; /* one where s / g and s · (1 / g) differ for half the scales */
    static uint8_t q[2][CT_N * CT_K / 2], nvs[CT_N * CT_K / 16], mxs[CT_N * CT_K / 32];
    for (int j = 0; j < CT_N * CT_K / 2; j++) {
        q[0][j] = (uint8_t)((unsigned)j * 2654435761u >> 13);
        q[1][j] = (uint8_t)((unsigned)j * 2246822519u >> 17);
    }
    for (int j = 0; j < CT_N * CT_K / 16; j++) nvs[j] = j == 37 ? 0 : (uint8_t)(8 + (j * 13) % 110); /* E4M3 2^-6 … 240 */
    for (int j = 0; j < CT_N * CT_K / 32; j++) mxs[j] = (uint8_t)(116 + (j * 5) % 19);          /* 2^-11 … 2^7 */
    REQUIRE(write_ct(in, q, nvs, mxs, g, 0) == 0);
    feather_ctx *ctx = feather_ctx_new(2);
    feather_convert_options o;
    feather_convert_result res;
    feather_error err = {0};
    feather_convert_defaults(&o);
    const char *ex[] = {"^m\\.[ab]\\."};
    REQUIRE(convert_excluding(ctx, in, out, &o, ex, &res) == FEATHER_OK);
    CHECK_EQ_U(ct_differ(out, q, nvs, mxs, g, 0, 0), 0);
    CHECK_EQ_U(ct_differ(out, q, nvs, mxs, g, 1, 0), 0);
    feather_reader *r;
    static const char *const gone[] = {"m.a.weight_packed", "m.a.weight_scale", "m.a.weight_global_scale",
                                       "m.a.input_global_scale", "m.b.weight_packed", "m.b.weight_scale"};
    REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        if (feather_find(r, gone[i])) test_fail(__FILE__, __LINE__, "%s was written", gone[i]);
    feather_close(r);
    REQUIRE(test_run("'%s' --reference '%s' '%s'", bin("feather-verify"), in, out) == 0);
    CHECK(!strstr(test_cmd_output(), "missing") && !strstr(test_cmd_output(), "not in the reference"));
    /* converted in their own blocks */
    o.quant.mode = FEATHER_SCALE_BLOCK;
    o.quant.group = 16;
    ex[0] = "^m\\.p\\.";
    REQUIRE(convert_excluding(ctx, in, out, &o, ex, &res) == FEATHER_OK);
    CHECK_EQ_U(res.tensors_converted, 2);
    CHECK_EQ_U(res.nwarnings, 0);
    CHECK_EQ_U(ct_differ(out, q, nvs, mxs, g, 0, 16), 0);
    CHECK_EQ_U(ct_differ(out, q, nvs, mxs, g, 1, 16), 0);
    REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
    for (size_t i = 0; i < sizeof gone / sizeof gone[0]; i++)
        if (feather_find(r, gone[i]) && strcmp(gone[i], "m.a.weight_scale") && strcmp(gone[i], "m.b.weight_scale"))
            test_fail(__FILE__, __LINE__, "%s was written", gone[i]);
    feather_close(r);
    o.quant.group = 32;
    REQUIRE(convert_excluding(ctx, in, out, &o, ex, &res) == FEATHER_OK);
    CHECK_EQ_U(ct_differ(out, q, nvs, mxs, g, 1, 32), 0);
    CHECK(ct_differ(out, q, nvs, mxs, g, 0, 32) > 0);
    CHECK(res.nwarnings == 1 && strstr(res.warnings[0], "1 quantised layer (m.a.weight_packed: U8) requantised"));
    feather_ctx_free(ctx);
    /* the plan, and feather-verify against the original */
    REQUIRE(test_run("'%s' --plan '%s'", bin("feather-convert"), in) == 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "m.a.weight_packed, written as m.a.weight  (NVFP4 [96, 80]: requantised to e5m2 "
                                          "(error adds up; none at block:16))");
    CHECK_STR_CONTAINS(test_cmd_output(), "MXFP4 [96, 80]: requantised to e5m2 (error adds up; none at block:32 or block:16)");
    CHECK_STR_CONTAINS(test_cmd_output(), "m.a.input_global_scale  (activation scale of m.a.weight_packed");
    REQUIRE(test_run("'%s' --plan --json '%s'", bin("feather-convert"), in) == 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "\"written_as\":\t\"m.b.weight\"");
    REQUIRE(test_run("'%s' -q --force -o '%s' '%s'", bin("feather-convert"), out, in) == 0);
    REQUIRE(test_run("'%s' --reference '%s' '%s'", bin("feather-verify"), in, out) == 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "3 measured");
    CHECK(!strstr(test_cmd_output(), "missing"));
    /* made from this input: up to date, though the output's m.a.weight_scale is not the input's */
    CHECK_EQ_U(test_run("'%s' -o '%s' '%s'", bin("feather-convert"), out, in), 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "up to date");
    /* MXFP4 of one block a row (K = 32: as many scales as rows, still blocks), exact at block:32;
     * then an E8M0 NaN (255) among its scales */
    for (int nan = 0; nan < 2; nan++) {
        uint8_t q1[16 * 16], s1[16];
        for (int j = 0; j < 16 * 16; j++) q1[j] = (uint8_t)(j * 37);
        for (int j = 0; j < 16; j++) s1[j] = nan && j == 3 ? 255 : (uint8_t)(120 + j);
        feather_writer *w;
        feather_write_options wo = {.no_hashes = 1, .overwrite = 1};
        REQUIRE(feather_writer_open(&w, in, &wo, &err) == FEATHER_OK);
        REQUIRE(!feather_writer_tensor(w, "m.c.weight_packed", FEATHER_U8, 2, (const uint64_t[2]){16, 16}, &err) &&
                !feather_writer_tensor(w, "m.c.weight_scale", FEATHER_U8, 2, (const uint64_t[2]){16, 1}, &err) &&
                !feather_writer_begin(w, &err) && !feather_writer_write(w, q1, sizeof q1, &err) &&
                !feather_writer_write(w, s1, sizeof s1, &err) && !feather_writer_commit(w, &err));
        const int rc = test_run("'%s' -q --force --scale block:32 -o '%s' '%s'", bin("feather-convert"), out, in);
        if (nan) {
            CHECK_EQ_U(rc, 2);
            CHECK_STR_CONTAINS(test_cmd_output(), "'m.c.weight_scale': scale 3 is nan (must be finite and not negative)");
            continue;
        }
        CHECK_EQ_U(rc, 0);
        REQUIRE(test_run("'%s' --reference '%s' '%s'", bin("feather-verify"), in, out) == 0);
        const char *row = strstr(test_cmd_output(), "m.c.weight "), *eol = row ? strchr(row, '\n') : NULL;
        const char *ex = row ? strstr(row, "exact") : NULL; /* its weight's error: none */
        CHECK(ex && (!eol || ex < eol));
    }
    /* a weight already under the name it would be written as */
    REQUIRE(write_ct(in, q, nvs, mxs, g, 1) == 0);
    CHECK_EQ_U(test_run("'%s' -q --force -o '%s' '%s'", bin("feather-convert"), out, in), 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "tensor 'm.a.weight': its weight 'm.a.weight_packed' would be written as "
                                          "'m.a.weight', which the file holds too");
}

TEST(convert_cli_bad_inputs_get_one_line_and_status) {
    const char *in = test_path("m.safetensors");
    REQUIRE(tu_write_model(in, small_model, NSMALL, 1, NULL) == 0);
    size_t len;
    uint8_t *orig = tu_read_file(in, &len);
    /* invalid file */
    const char *bad = test_path("bad.safetensors");
    FILE *f = fopen(bad, "wb");
    fputs("not a safetensors file at all", f);
    fclose(f);
    CHECK_EQ_U(test_run("%s -q %s", bin("feather-convert"), bad), 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "bad.safetensors");
    CHECK(strchr(test_cmd_output(), '\n') == test_cmd_output() + strlen(test_cmd_output()) - 1);
    CHECK(!exists(test_path("bad-fp8e5m2.safetensors")));
    /* unknown preset: a bad option value */
    CHECK_EQ_U(test_run("%s -q --preset nosuch %s", bin("feather-convert"), in), 64);
    CHECK_STR_CONTAINS(test_cmd_output(), "unknown preset");
    /* usage */
    CHECK_EQ_U(test_run("%s --scale block:7 %s", bin("feather-convert"), in), 64);
    CHECK_EQ_U(test_run("%s --bogus", bin("feather-convert")), 64);
    /* output equals the input */
    int rc = test_run("%s -q -o %s %s", bin("feather-convert"), in, in);
    CHECK(rc == 2 || rc == 64);
    CHECK_STR_CONTAINS(test_cmd_output(), "input");
    /* two inputs whose outputs would have one name: refused before either is converted */
    CHECK_EQ_U(test_run("mkdir -p %s/x %s/y && cp %s %s/x/m.safetensors && cp %s %s/y/m.safetensors", test_tmpdir(),
                        test_tmpdir(), in, test_tmpdir(), in, test_tmpdir()),
               0);
    CHECK_EQ_U(test_run("cd %s && %s --force -o outs/ x/m.safetensors y/m.safetensors", test_tmpdir(), bin("feather-convert")),
               64);
    CHECK_STR_CONTAINS(test_cmd_output(), "x/m.safetensors and y/m.safetensors would both be written to "
                                          "outs/m-fp8e5m2.safetensors");
    struct stat sb;
    CHECK(stat(test_path("outs"), &sb) != 0);
    /* the same input twice is no clash (the second is up to date) */
    CHECK_EQ_U(test_run("cd %s && %s -q -o outs/ x/m.safetensors x/m.safetensors", test_tmpdir(), bin("feather-convert")), 0);
    /* nor may one input's output be another input of the run */
    CHECK_EQ_U(test_run("cd %s && %s -q --force -o outs/ x/m.safetensors outs/m-fp8e5m2.safetensors", test_tmpdir(),
                        bin("feather-convert")),
               64);
    CHECK_STR_CONTAINS(test_cmd_output(), "is the input outs/m-fp8e5m2.safetensors");
    /* nothing selected */
    const char *none = test_path("none.safetensors");
    const tspec t[] = {{"a.bias", FEATHER_F16, 1, {64}}};
    REQUIRE(tu_write_model(none, t, 1, 1, NULL) == 0);
    CHECK_EQ_U(test_run("%s -q %s", bin("feather-convert"), none), 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "nothing to convert");
    /* which --plan then shows, tensor by tensor, before the same refusal */
    CHECK_EQ_U(test_run("%s --plan %s", bin("feather-convert"), none), 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "a.bias  (not a weight");
    CHECK_STR_CONTAINS(test_cmd_output(), "nothing to convert");
    CHECK_EQ_U(test_run("%s --plan --json %s", bin("feather-convert"), none), 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "\"error\":");
    /* output exists */
    const char *out = test_path("exists.safetensors");
    f = fopen(out, "wb");
    fputs("precious", f);
    fclose(f);
    CHECK_EQ_U(test_run("%s -q -o %s %s", bin("feather-convert"), out, in), 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "exists");
    size_t ol;
    uint8_t *ob = tu_read_file(out, &ol);
    CHECK(ob && ol == 8 && !memcmp(ob, "precious", 8));
    free(ob);
    /* disk full (a file-size limit makes write() fail with EFBIG) */
    const char *full = test_path("full.safetensors");
    rc = test_run("ulimit -f 4; %s -q -o %s %s", bin("feather-convert"), full, in);
    CHECK_EQ_U(rc, 2);
    CHECK(!exists(full));
    /* the input is untouched by all of the above */
    size_t len2;
    uint8_t *now = tu_read_file(in, &len2);
    CHECK(now && len == len2 && !memcmp(orig, now, len));
    free(orig);
    free(now);
}

TEST(convert_cli_permission_denied) {
    const char *in = test_path("m.safetensors");
    REQUIRE(tu_write_model(in, small_model, NSMALL, 1, NULL) == 0);
    const char *dir = test_path("ro");
    REQUIRE(mkdir(dir, 0755) == 0);
    int rc;
    chmod(test_tmpdir(), 0755);
    chmod(in, 0644);
    if (geteuid() == 0) /* root writes anywhere: run the program as nobody instead */
        rc = test_run("setpriv --reuid=65534 --regid=65534 --clear-groups %s -q -o %s/out.safetensors %s",
                      bin("feather-convert"), dir, in);
    else {
        chmod(dir, 0555);
        rc = test_run("%s -q -o %s/out.safetensors %s", bin("feather-convert"), dir, in);
    }
    CHECK_EQ_U(rc, 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "ermission denied");
    CHECK_EQ_U(count_dir(dir), 0);
    chmod(dir, 0755);
}

TEST(convert_cli_interrupt_leaves_nothing) {
    /* Big enough that the conversion is still running when the signal arrives. */
    const char *in = test_path("big.safetensors"), *out = test_path("big-out.safetensors");
    tspec t[24];
    char names[24][32];
    for (int i = 0; i < 24; i++) {
        snprintf(names[i], sizeof names[i], "l%d.weight", i);
        t[i] = (tspec){names[i], FEATHER_BF16, 2, {2048, 2048}};
    }
    REQUIRE(tu_write_model(in, t, 24, 9, NULL) == 0);
    for (int attempt = 0; attempt < 3; attempt++) {
        pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0) {
            char b[1024];
            snprintf(b, sizeof b, "%s", bin("feather-convert"));
            if (!freopen("/dev/null", "w", stderr)) _exit(126);
            execl(b, b, "-q", "-j", "1", "--scale", "block:128", "-o", out, in, (char *)NULL);
            _exit(127);
        }
        usleep(150000 + attempt * 100000);
        kill(pid, SIGINT);
        int st;
        waitpid(pid, &st, 0);
        REQUIRE(WIFEXITED(st));
        if (WEXITSTATUS(st) == 0) { unlink(out); continue; } /* finished first: try again */
        CHECK_EQ_U(WEXITSTATUS(st), 130);
        CHECK(!exists(out));
        CHECK_EQ_U(count_dir(test_tmpdir()), 1); /* only the input: no temporary left */
        return;
    }
    test_skip("the conversion finished before the signal three times");
}

/* samples/batch-convert.sh with the real converter: a directory with two models, a sharded
 * one, a LoRA (nothing to convert: left alone, not a failure) and a broken file; a second run
 * resumes (skips everything that is done). */
TEST(convert_batch_script_converts_in_parallel_and_resumes) {
    char dir[1024], out[1024], sample[1100];
    snprintf(dir, sizeof dir, "%s", test_path("models"));
    snprintf(out, sizeof out, "%s", test_path("converted"));
    snprintf(sample, sizeof sample, "%s/feather-sample", test_bindir());
    REQUIRE(test_run("mkdir -p %s/sub && %s --family wan -o %s/wan.safetensors && "
                     "%s --family flux -o %s/sub/flux.safetensors && "
                     "%s --family qwen-image --shards 2 -o %s/qwen.safetensors.index.json && "
                     "printf 'garbage' > %s/broken.safetensors",
                     dir, sample, dir, sample, dir, sample, dir, dir) == 0);
    static const tspec lora[] = {{"blocks.0.attn.qkv.lora_A.weight", FEATHER_F16, 2, {16, 64}},
                                 {"blocks.0.attn.qkv.lora_B.weight", FEATHER_F16, 2, {192, 16}}};
    char lp[1100];
    snprintf(lp, sizeof lp, "%s/lora.safetensors", dir);
    REQUIRE(tu_write_model(lp, lora, 2, 7, NULL) == 0);
    int rc = test_run("FEATHER_CONVERT=%s/feather-convert sh samples/batch-convert.sh -j 2 -o %s %s",
                      test_bindir(), out, dir);
    CHECK_EQ_U(rc, 2); /* the broken file failed, the rest converted */
    CHECK_STR_CONTAINS(test_cmd_output(), "3 converted, 0 skipped, 1 with nothing to convert, 1 failed");
    char p[1200];
    snprintf(p, sizeof p, "%s/sub/flux-fp8e5m2.safetensors", out);
    feather_reader *r;
    feather_error err = {0};
    CHECK(feather_open(&r, p, 0, &err) == FEATHER_OK && (feather_close(r), 1));
    snprintf(p, sizeof p, "%s/qwen-fp8e5m2.safetensors.index.json", out);
    if (feather_open(&r, p, 0, &err) != FEATHER_OK) test_fail(__FILE__, __LINE__, "%s", err.message);
    else {
        CHECK_EQ_U(feather_shard_count(r), 2);
        feather_close(r);
    }
    snprintf(p, sizeof p, "%s/batch-summary.json", out);
    size_t len;
    char *sum = (char *)tu_read_file(p, &len);
    REQUIRE(sum);
    CHECK(strstr(sum, "\"status\":") && strstr(sum, "broken.safetensors"));
    CHECK_STR_CONTAINS(sum, "\"status\":\t\"nothing to convert\"");
    CHECK_STR_CONTAINS(sum, "\"nothing_to_convert\": 1");
    free(sum);
    snprintf(p, sizeof p, "%s/lora-fp8e5m2.safetensors", out);
    CHECK(access(p, F_OK) != 0);
    rc = test_run("FEATHER_CONVERT=%s/feather-convert sh samples/batch-convert.sh -j 2 -o %s %s",
                  test_bindir(), out, dir);
    CHECK_EQ_U(rc, 2);
    CHECK_STR_CONTAINS(test_cmd_output(), "0 converted, 3 skipped, 1 with nothing to convert, 1 failed");

    /* The LoRA alone: nothing failed, so the batch succeeds. */
    char only[1024];
    snprintf(only, sizeof only, "%s/loras", test_tmpdir());
    REQUIRE(test_run("mkdir -p %s", only) == 0);
    snprintf(lp, sizeof lp, "%s/lora.safetensors", only);
    REQUIRE(tu_write_model(lp, lora, 2, 7, NULL) == 0);
    rc = test_run("FEATHER_CONVERT=%s/feather-convert sh samples/batch-convert.sh %s", test_bindir(), only);
    CHECK_EQ_U(rc, 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "0 converted, 0 skipped, 1 with nothing to convert, 0 failed");
}

/* A full checkpoint (the SDXL sample: UNet, two text encoders, VAE): the UNet's linears are
 * converted, every tensor of the text encoders and the VAE comes out byte for byte. */
TEST(convert_full_checkpoint_converts_only_the_diffusion_model) {
    char in[1100], out[1100];
    snprintf(in, sizeof in, "%s", test_path("sdxl.safetensors"));
    snprintf(out, sizeof out, "%s", test_path("sdxl-fp8e5m2.safetensors"));
    REQUIRE(test_run("%s -q --family sdxl --hidden 64 --blocks 1 -o %s", bin("feather-sample"), in) == 0);
    REQUIRE(test_run("%s --plan %s", bin("feather-convert"), in) == 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "conditioner.embedders.0.transformer.text_model.encoder.layers.0.self_attn.q_proj.weight  "
                                          "(BF16 [64, 64] outside the diffusion model");
    CHECK_STR_CONTAINS(test_cmd_output(), "conditioner.embedders.1.model.transformer.resblocks.0.mlp.c_fc.weight  "
                                          "(BF16 [256, 64] outside the diffusion model");
    REQUIRE(test_run("%s -q %s -o %s", bin("feather-convert"), in, out) == 0);
    check_roundtrip(in, out, 1);
    feather_error err = {0};
    feather_reader *ri, *ro;
    REQUIRE(feather_open(&ri, in, 0, &err) == FEATHER_OK);
    REQUIRE(feather_open(&ro, out, 0, &err) == FEATHER_OK);
    size_t converted = 0, outside = 0;
    for (size_t i = 0; i < feather_count(ri); i++) {
        const feather_tensor *t = feather_tensor_at(ri, i), *u = feather_find(ro, t->name);
        REQUIRE(u);
        if (strncmp(t->name, "model.diffusion_model.", 22)) {
            outside++;
            CHECK(u->dtype == t->dtype);
        } else {
            converted += u->dtype == FEATHER_F8_E5M2;
        }
    }
    CHECK(outside >= 40); /* the two text encoders and the VAE */
    CHECK(converted >= 15);
    CHECK(feather_find(ro, "model.diffusion_model.input_blocks.1.1.transformer_blocks.0.attn2.to_k.weight")->dtype ==
          FEATHER_F8_E5M2);
    feather_close(ri);
    feather_close(ro);
}

TEST(convert_sharded_and_zst_inputs_and_outputs) {
    char dir[1024], sample[1100];
    snprintf(dir, sizeof dir, "%s", test_tmpdir());
    snprintf(sample, sizeof sample, "%s/feather-sample", test_bindir());
    REQUIRE(test_run("%s --family sd3 --shards 3 -o %s/m.safetensors.index.json && "
                     "%s --family sdxl --zstd -o %s/x.safetensors", sample, dir, sample, dir) == 0);
    feather_ctx *ctx = feather_ctx_new(2);
    feather_convert_options o;
    feather_convert_defaults(&o);
    feather_convert_result res;
    feather_error err = {0};
    char in[1200], outp[1200];
    snprintf(in, sizeof in, "%s/m.safetensors.index.json", dir);
    REQUIRE(feather_default_output(in, NULL, FEATHER_FP8_E5M2, 0, outp, sizeof outp, &err) == FEATHER_OK);
    CHECK_STR_CONTAINS(outp, "m-fp8e5m2.safetensors.index.json");
    /* under a umask of 077 the index is private like its shards */
    const mode_t um = umask(077);
    feather_status st = feather_convert(ctx, in, outp, &o, &res, &err);
    umask(um);
    if (st) test_fail(__FILE__, __LINE__, "%s", err.message);
    struct stat si, s1;
    char shard1[1300];
    snprintf(shard1, sizeof shard1, "%s/m-00001-of-00003-fp8e5m2.safetensors", dir);
    REQUIRE(stat(outp, &si) == 0 && stat(shard1, &s1) == 0);
    CHECK_EQ_U(si.st_mode & 0777, 0600);
    CHECK_EQ_U(s1.st_mode & 0777, 0600);
    feather_reader *a, *b;
    REQUIRE(feather_open(&a, in, 0, &err) == FEATHER_OK);
    REQUIRE(feather_open(&b, outp, 0, &err) == FEATHER_OK);
    CHECK_EQ_U(feather_shard_count(b), 3);
    CHECK(!strcmp(feather_metadata_get(b, 0, "feather.layout"), "packed"));
    /* every input tensor is in the output, converted or not */
    for (size_t i = 0; i < feather_count(a); i++) CHECK(feather_find(b, feather_tensor_at(a, i)->name) != NULL);
    feather_close(a);
    feather_close(b);
    /* .zst in, .zst out; the output decompresses to a valid checkpoint */
    snprintf(in, sizeof in, "%s/x.safetensors.zst", dir);
    REQUIRE(feather_default_output(in, NULL, FEATHER_FP8_E5M2, 1, outp, sizeof outp, &err) == FEATHER_OK);
    CHECK_STR_CONTAINS(outp, "x-fp8e5m2.safetensors.zst");
    st = feather_convert(ctx, in, outp, &o, &res, &err);
    if (st) test_fail(__FILE__, __LINE__, "%s", err.message);
    REQUIRE(feather_open(&b, outp, 0, &err) == FEATHER_OK);
    CHECK(feather_count(b) > 100);
    feather_close(b);
    feather_ctx_free(ctx);
}

/* A model whose converted weights are all exact in fp8 (all zeros here, as a fresh LoRA's
 * up-projections are): the summary says so instead of averaging no SNR at all. */
/* --layout comfy without --scale takes one scale per tensor (the default, channel, is one the
 * layout cannot hold); an explicit --scale channel is still refused. */
TEST(convert_cli_comfy_layout_defaults_to_tensor_scales) {
    char in[1024], out[1024];
    snprintf(in, sizeof in, "%s", test_path("m.safetensors"));
    snprintf(out, sizeof out, "%s", test_path("m-comfy.safetensors"));
    REQUIRE(tu_write_model(in, small_model, NSMALL, 1, NULL) == 0);
    CHECK_EQ_U(test_run("%s -q --force --json --layout comfy -o %s %s", bin("feather-convert"), out, in), 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "\"preset\":\t\"generic\"");
    feather_reader *r = NULL;
    feather_error err = {0};
    REQUIRE(feather_open(&r, out, 0, &err) == FEATHER_OK);
    const feather_tensor *w = feather_find(r, "blocks.0.mlp.fc1.weight");
    const feather_tensor *sc = feather_find(r, "blocks.0.mlp.fc1.weight_scale");
    REQUIRE(w && sc);
    CHECK(w->dtype == FEATHER_F8_E5M2 && w->ndim == 2 && w->shape[0] == 128 && w->shape[1] == 64);
    CHECK(sc->dtype == FEATHER_F32 && sc->ndim == 0);
    CHECK(feather_find(r, "blocks.0.mlp.fc1.comfy_quant") != NULL);
    feather_close(r);
    CHECK_EQ_U(test_run("%s -q --force --layout comfy --scale channel -o %s %s", bin("feather-convert"), out, in), 64);
    CHECK_STR_CONTAINS(test_cmd_output(), "one scale per tensor");
}

TEST(convert_cli_summary_of_exact_weights) {
    REQUIRE(tu_write_sparse_model(test_path("z.safetensors"), 256, 256) == 0);
    CHECK_EQ_U(test_run("cd %s && %s/feather-convert --force z.safetensors", test_tmpdir(), test_bindir()), 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "1 tensor converted, 0 kept");
    CHECK_STR_CONTAINS(test_cmd_output(), "weights exact (no rounding error)");
    CHECK(!strstr(test_cmd_output(), " nan") && !strstr(test_cmd_output(), " inf"));
    CHECK_EQ_U(test_run("cd %s && %s/feather-convert --force --json z.safetensors", test_tmpdir(), test_bindir()), 0);
    CHECK(!strstr(test_cmd_output(), "snr_mean_db") && !strstr(test_cmd_output(), "snr_worst_db"));
}

/* On a terminal one line is rewritten in place (bytes, MB/s, ETA, tensor); elsewhere nothing
 * but the summary is printed, and -q prints nothing at all. */
TEST(convert_cli_progress_only_on_a_terminal) {
    char in[1024];
    snprintf(in, sizeof in, "%s", test_path("m.safetensors"));
    REQUIRE(tu_write_model(in, small_model, NSMALL, 1, NULL) == 0);
    if (test_run("command -v script") != 0) {
        test_skip("*** progress line NOT CHECKED: script(1) from bsdutils is missing ***");
        return;
    }
    CHECK_EQ_U(test_run("cd %s && script -q -e -c '%s/feather-convert --force m.safetensors' /dev/null",
                        test_tmpdir(), test_bindir()), 0);
    CHECK_STR_CONTAINS(test_cmd_output(), "\r\033[K");
    CHECK_STR_CONTAINS(test_cmd_output(), "MB/s  ETA ");
    CHECK_STR_CONTAINS(test_cmd_output(), "-> m-fp8e5m2.safetensors: 3 tensors converted, 3 kept");
    CHECK_EQ_U(test_run("cd %s && %s/feather-convert --force m.safetensors", test_tmpdir(), test_bindir()), 0);
    CHECK(!strchr(test_cmd_output(), '\r') && !strstr(test_cmd_output(), "ETA"));
    CHECK_STR_CONTAINS(test_cmd_output(), "weight SNR mean");
    CHECK_STR_CONTAINS(test_cmd_output(), " s on the CPU\n"); /* a small file: auto takes the CPU */
    CHECK_EQ_U(test_run("cd %s && script -q -e -c '%s/feather-convert -q --force m.safetensors' /dev/null",
                        test_tmpdir(), test_bindir()), 0);
    CHECK(test_cmd_output()[0] == 0);
}

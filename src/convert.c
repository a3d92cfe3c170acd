/* Conversion driver: plan → one streaming pass over the input → new checkpoint(s).
 *
 * The input is read once, in file order, so that its XXH3 (recorded as feather.source_xxh3)
 * comes for free and the disk streams sequentially. Each output tensor is written as soon as
 * it is produced; memory holds at most one converted tensor's bytes and scales. Outputs are
 * built under temporary names and all renamed into place only when everything succeeded. */
#include "internal.h"
#include "gpu_host.h"
#include "verify_rows.h"
#include "feather/convert.h"

#include <cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FEATHER_DEFAULT_MODE FEATHER_SCALE_CHANNEL

void feather_convert_defaults(feather_convert_options *o) {
    memset(o, 0, sizeof *o);
    o->quant.format = FEATHER_FP8_E5M2;
    o->quant.mode = FEATHER_DEFAULT_MODE;
    o->layout = FEATHER_LAYOUT_PACKED;
    o->device = FEATHER_DEVICE_AUTO;
}

/* ---------------------------------------------------------------- output names */

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* "dir/model.safetensors(.zst)" → "model", "x.safetensors.index.json" → "x" (index=1). */
static void stem_of(const char *path, char *stem, size_t len, int *index) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(stem, len, "%s", base);
    *index = 0;
    static const char *const sufs[] = {".safetensors.index.json", ".safetensors.zst", ".safetensors", ".zst"};
    for (size_t i = 0; i < sizeof sufs / sizeof sufs[0]; i++)
        if (feather_ends_with(stem, sufs[i])) {
            stem[strlen(stem) - strlen(sufs[i])] = 0;
            *index = i == 0;
            break;
        }
}

/* Whether a kept weight is quantised in a format feather does not read: not float, not fp8,
 * with a scale beside it (NVFP4's U8 pairs of codes, an int8 weight). */
static int other_quantised(feather_reader *r, const feather_plan_entry *e) {
    const feather_tensor *t = e->tensor;
    return e->action == FEATHER_KEEP && t->ndim == 2 && feather_ends_with(t->name, ".weight") && !feather_is_fp8(t->dtype) &&
           !feather_is_float(t->dtype) && feather_fp8_scale_of(r, t->name);
}

feather_status feather_default_output(const char *input, const char *dir, feather_fp8 fmt, int zstd,
                                      char *buf, size_t len, feather_error *err) {
    char stem[1024], in_dir[4096];
    int index;
    const char *tag = fmt == FEATHER_FP8_E5M2 ? "fp8e5m2" : "fp8e4m3fn";
    size_t ilen = strlen(input);
    while (ilen > 1 && input[ilen - 1] == '/') ilen--;
    char in[4096];
    snprintf(in, sizeof in, "%.*s", (int)ilen, input);
    if (is_dir(in)) {
        /* A model directory becomes a sibling directory with the same file names. */
        stem_of(in, stem, sizeof stem, &index);
        int n = dir ? snprintf(buf, len, "%s/%s-%s", dir, stem, tag) : snprintf(buf, len, "%s-%s", in, tag);
        if (n < 0 || (size_t)n >= len) return feather_fail(err, FEATHER_E_ARG, "%s: output path too long", input);
        return FEATHER_OK;
    }
    stem_of(in, stem, sizeof stem, &index);
    if (feather_dir_of(in, in_dir, sizeof in_dir)) return feather_fail(err, FEATHER_E_ARG, "%s: output path too long", input);
    const char *d = dir ? dir : strchr(in, '/') ? in_dir : NULL; /* "model" stays "model-…" */
    int n = snprintf(buf, len, "%s%s%s-%s.safetensors%s", d ? d : "", d ? "/" : "", stem, tag,
                     index ? ".index.json" : zstd ? ".zst" : "");
    if (n < 0 || (size_t)n >= len) return feather_fail(err, FEATHER_E_ARG, "%s: output path too long", input);
    return FEATHER_OK;
}

/* ---------------------------------------------------------------- state */

typedef struct conv {
    feather_ctx *ctx;
    const feather_convert_options *o;
    feather_reader *r;
    feather_plan *plan;
    feather_convert_result *res;
    feather_error *err;
    feather_device dev; /* CPU or GPU: where weights are quantised */
    char options[2048];
    uint64_t done, total;
    /* Two slots of one tensor's output each, grown as needed: the writer thread streams one
     * while the next is produced. On the GPU the code slots are page-locked, so the codes come
     * back from the device straight into them. */
    uint8_t *qs[2];
    size_t q_caps[2];
    float *ss[2];
    size_t s_caps[2];
    uint8_t *q;       /* the slot being produced */
    float *scales;
    float *wide; /* quantised inputs dequantised to f32: a strip of rows per thread, or a whole weight */
    size_t w_cap;
    float *in_scales; /* a requantised or dequantised input's scales */
    size_t in_cap;
    feather_ctx **solo;        /* a one-thread context per thread, for strips of requantised weights */
    feather_error *solo_errs;  /* and an error each */
    int nsolo;
    double snr_sum;
    uint64_t snr_count;
} conv;

static feather_status grow(void **p, size_t *cap, size_t need, feather_error *err) {
    if (need <= *cap) return FEATHER_OK;
    void *n = realloc(*p, need);
    if (!n) return feather_fail(err, FEATHER_E_NOMEM, "out of memory (%zu bytes for one tensor)", need);
    *p = n;
    *cap = need;
    return FEATHER_OK;
}

/* Canonical description of everything that changes the output bytes; an existing output made
 * from the same input with the same string is up to date. */
static void options_string(const feather_convert_options *o, const char *preset, char *buf, size_t len) {
    char scale[32];
    size_t n = (size_t)snprintf(buf, len, "fp8=%s layout=%s scale=%s grid=%u preset=%s nonfinite=%s",
                                feather_fp8_name(o->quant.format), feather_layout_name(o->layout),
                                feather_scale_format(o->quant.mode, o->quant.group, scale, sizeof scale),
                                feather_grid_size(o->quant.grid), preset,
                                o->quant.allow_nonfinite ? "map" : "error");
    for (size_t i = 0; i < o->ninclude && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, " include=%s", o->include[i]);
    for (size_t i = 0; i < o->nexclude && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, " exclude=%s", o->exclude[i]);
}

static const char *hex64(uint64_t v, char *buf) {
    snprintf(buf, 17, "%016llx", (unsigned long long)v);
    return buf;
}

static void warn(feather_convert_result *res, const char *fmt, ...) FEATHER_PRINTF(2, 3);
static void warn(feather_convert_result *res, const char *fmt, ...) {
    if (res->nwarnings >= FEATHER_MAX_WARNINGS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->warnings[res->nwarnings++], sizeof res->warnings[0], fmt, ap);
    va_end(ap);
}

/* The one warning of --allow-nonfinite, for values a cast mapped and codes a repack did. */
static void warn_mapped(feather_convert_result *res, const char *name, uint64_t n) {
    warn(res, "%s: %llu NaN/Inf values mapped (NaN to 0, Inf to ±max)", name, (unsigned long long)n);
}

/* ---------------------------------------------------------------- declarations */

static int converted(const feather_plan_entry *e) {
    return e->action == FEATHER_CONVERT || e->action == FEATHER_REPACK || e->action == FEATHER_REQUANT;
}

/* The scale layout of a converted entry in the output. */
static void out_scale_shape(const conv *c, const feather_plan_entry *e, unsigned *ndim, uint64_t shape[2]) {
    feather_scale_mode mode = c->o->quant.mode;
    unsigned group = c->o->quant.group;
    if (e->action == FEATHER_REPACK) {
        /* Scales travel unchanged: their shape says what they are. */
        uint64_t cnt = e->scale ? e->scale->nelem : 1;
        if (cnt <= 1) { *ndim = 0; return; }
        if (cnt == e->n) { *ndim = 1; shape[0] = e->n; return; }
        *ndim = 2;
        shape[0] = e->n;
        shape[1] = cnt / e->n;
        return;
    }
    if (mode == FEATHER_SCALE_CHANNEL) { *ndim = 1; shape[0] = e->n; return; }
    if (mode == FEATHER_SCALE_BLOCK) { *ndim = 2; shape[0] = e->n; shape[1] = e->k / group; return; }
    *ndim = 0;
}

static uint64_t out_scale_count(const conv *c, const feather_plan_entry *e) {
    unsigned nd;
    uint64_t sh[2];
    out_scale_shape(c, e, &nd, sh);
    return nd == 0 ? 1 : nd == 1 ? sh[0] : sh[0] * sh[1];
}

static const char *comfy_quant_json(feather_fp8 f) {
    /* e5m2 layers are marked for a full-precision matmul: ComfyUI's fp8 matmul path would pair
     * an e5m2 weight with an e5m2 activation, which cuBLASLt rejects. */
    return f == FEATHER_FP8_E5M2 ? "{\"format\": \"float8_e5m2\", \"full_precision_matrix_mult\": true}"
                                 : "{\"format\": \"float8_e4m3fn\"}";
}

/* The dtype of a (not dropped) entry's tensor in the output. */
static feather_dtype out_dtype(const conv *c, const feather_plan_entry *e) {
    if (e->action == FEATHER_KEEP) return e->tensor->dtype;
    if (e->action == FEATHER_DEQUANT) return FEATHER_BF16;
    return feather_fp8_dtype(c->o->quant.format);
}

/* The names a converted weight X.weight's scale and ComfyUI tag are written under: X.weight_scale
 * and X.comfy_quant (buffers of 4200 bytes). */
static void companion_names(const feather_plan_entry *e, char *scale, char *tag) {
    snprintf(scale, 4200, "%s_scale", e->name);
    snprintf(tag, 4200, "%.*s.comfy_quant", (int)(strlen(e->name) - strlen(".weight")), e->name);
}

static feather_status declare_entry(conv *c, feather_writer *w, const feather_plan_entry *e) {
    const feather_tensor *t = e->tensor;
    feather_error *err = c->err;
    feather_status st;
    if (e->action == FEATHER_DROP) return FEATHER_OK;
    const feather_dtype dt = out_dtype(c, e);
    if (e->action == FEATHER_KEEP) return feather_writer_tensor(w, t->name, dt, t->ndim, t->shape, err);
    if (e->action == FEATHER_DEQUANT) {
        const uint64_t shape[2] = {e->n, e->k};
        return feather_writer_tensor(w, e->name, dt, 2, shape, err);
    }
    if (c->o->layout == FEATHER_LAYOUT_PACKED) {
        uint64_t shape[3] = {e->k / 16, e->n, 16};
        st = feather_writer_tensor(w, e->name, dt, 3, shape, err);
    } else {
        uint64_t shape[2] = {e->n, e->k};
        st = feather_writer_tensor(w, e->name, dt, 2, shape, err);
    }
    if (st) return st;
    char scale[4200], tag[4200];
    unsigned nd;
    uint64_t sh[2];
    out_scale_shape(c, e, &nd, sh);
    companion_names(e, scale, tag);
    if ((st = feather_writer_tensor(w, scale, FEATHER_F32, nd, sh, err))) return st;
    if (c->o->layout == FEATHER_LAYOUT_COMFY) {
        uint64_t jl = strlen(comfy_quant_json(c->o->quant.format));
        if ((st = feather_writer_tensor(w, tag, FEATHER_U8, 1, &jl, err))) return st;
    }
    return FEATHER_OK;
}

/* Whether an input's feather.tensors entry can stand for a converted tensor of (n, k): a dtype,
 * and the shape [n, k] (an entry that says otherwise would make the output fail verification). */
static int record_fits(const cJSON *rec, uint64_t n, uint64_t k) {
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(rec, "shape");
    const cJSON *d0 = cJSON_GetArrayItem(sh, 0), *d1 = cJSON_GetArrayItem(sh, 1);
    return cJSON_IsString(cJSON_GetObjectItemCaseSensitive(rec, "dtype")) && cJSON_GetArraySize(sh) == 2 &&
           cJSON_IsNumber(d0) && cJSON_IsNumber(d1) && d0->valuedouble == (double)n && d1->valuedouble == (double)k;
}

/* Original dtype and shape of each converted tensor, as a JSON object string. For a repacked
 * input the original is carried over from its own feather.tensors when it has one that fits. */
static char *tensors_json(conv *c, unsigned shard) {
    cJSON *root = cJSON_CreateObject(), *prev = NULL;
    const char *pv = feather_metadata_get(c->r, shard, "feather.tensors");
    if (pv) prev = cJSON_Parse(pv);
    feather_json_index pix;
    if (feather_json_index_init(&pix, prev)) {
        cJSON_Delete(prev);
        cJSON_Delete(root);
        return NULL;
    }
    for (size_t i = 0; i < feather_plan_count(c->plan); i++) {
        const feather_plan_entry *e = feather_plan_at(c->plan, i);
        if (!converted(e) || e->tensor->shard != shard) continue;
        const cJSON *old = feather_json_index_get(&pix, e->name);
        if (old && record_fits(old, e->n, e->k)) {
            cJSON_AddItemToObject(root, e->name, cJSON_Duplicate(old, 1));
            continue;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "dtype", feather_dtype_name(e->tensor->dtype));
        cJSON *sh = cJSON_CreateArray();
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)e->n));
        cJSON_AddItemToArray(sh, cJSON_CreateNumber((double)e->k));
        cJSON_AddItemToObject(o, "shape", sh);
        cJSON_AddItemToObject(root, e->name, o);
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    feather_json_index_free(&pix);
    cJSON_Delete(prev);
    return s;
}

/* ComfyUI's per-layer header (_quantization_metadata) for one shard: the converted layers in
 * the comfy layout, and the input's entries for quantised weights kept as they are (a layer
 * excluded, a text encoder's in a full checkpoint, a layer of a format feather does not read),
 * which ComfyUI would otherwise load as plain weights.
 * *n: how many entries. */
static char *comfy_layers_json(conv *c, unsigned shard, size_t *n) {
    cJSON *root = cJSON_CreateObject(), *layers = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format_version", "1.0");
    *n = 0;
    for (size_t i = 0; i < feather_plan_count(c->plan); i++) {
        const feather_plan_entry *e = feather_plan_at(c->plan, i);
        if (e->tensor->shard != shard || !feather_ends_with(e->name, ".weight")) continue;
        char layer[4200];
        snprintf(layer, sizeof layer, "%.*s", (int)(strlen(e->name) - 7), e->name);
        const cJSON *kept = e->action == FEATHER_KEEP ? feather_quant_layer(c->r, shard, layer) : NULL;
        if (kept) {
            cJSON_AddItemToObject(layers, layer, cJSON_Duplicate(kept, 1));
            ++*n;
            continue;
        }
        if (!converted(e) || c->o->layout != FEATHER_LAYOUT_COMFY) continue;
        ++*n;
        cJSON *l = cJSON_CreateObject();
        if (c->o->quant.format == FEATHER_FP8_E5M2) {
            cJSON_AddStringToObject(l, "format", "float8_e5m2");
            cJSON_AddBoolToObject(l, "full_precision_matrix_mult", 1);
        } else {
            cJSON_AddStringToObject(l, "format", "float8_e4m3fn");
        }
        cJSON_AddItemToObject(layers, layer, l);
    }
    cJSON_AddItemToObject(root, "layers", layers);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

static feather_status declare_metadata(conv *c, feather_writer *w, unsigned shard) {
    feather_error *err = c->err;
    feather_status st = FEATHER_OK;
    /* The input's own metadata travels, except what this conversion rewrites. */
    for (size_t i = 0; i < feather_metadata_count(c->r, shard); i++) {
        const char *k = feather_metadata_key(c->r, shard, i);
        if (!strncmp(k, "feather.", 8) || !strcmp(k, "_quantization_metadata")) continue;
        if ((st = feather_writer_metadata(w, k, feather_metadata_value(c->r, shard, i), err))) return st;
    }
    char fmt[64], scale[32], grid[16];
    const char *src = feather_shard_path(c->r, shard);
    const char *base = strrchr(src, '/');
    snprintf(fmt, sizeof fmt, "%s/%d", FEATHER_FORMAT_NAME, FEATHER_FORMAT_VERSION);
    snprintf(grid, sizeof grid, "%u", feather_grid_size(c->o->quant.grid));
    feather_scale_format(c->o->quant.mode, c->o->quant.group, scale, sizeof scale);
    const char *kv[][2] = {
        {"feather.format", fmt},
        {"feather.layout", feather_layout_name(c->o->layout)},
        {"feather.fp8", feather_fp8_name(c->o->quant.format)},
        {"feather.scale", scale},
        {"feather.grid", grid},
        {"feather.preset", feather_plan_preset(c->plan)},
        {"feather.options", c->options},
        {"feather.source", base ? base + 1 : src},
        {"feather.version", FEATHER_VERSION_STRING},
        {"feather.command", c->o->command_line ? c->o->command_line : ""},
    };
    for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++)
        if ((st = feather_writer_metadata(w, kv[i][0], kv[i][1], err))) return st;
    if ((st = feather_writer_metadata_reserve(w, "feather.source_xxh3", 16, err))) return st;
    char *tj = tensors_json(c, shard);
    if (!tj) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
    st = feather_writer_metadata(w, "feather.tensors", tj, err);
    free(tj);
    if (st) return st;
    size_t nl;
    char *cj = comfy_layers_json(c, shard, &nl);
    if (!cj) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
    if (c->o->layout == FEATHER_LAYOUT_COMFY || nl) st = feather_writer_metadata(w, "_quantization_metadata", cj, err);
    free(cj);
    return st;
}

/* ---------------------------------------------------------------- processing */

static double snr_db(double sum_sq, double err_sq) {
    if (err_sq <= 0) return INFINITY;
    if (sum_sq <= 0) return -INFINITY;
    return 10.0 * log10(sum_sq / err_sq);
}

static void note_snr(conv *c, const feather_tensor *t, const feather_quant_stats *s) {
    double snr = snr_db(s->sum_sq, s->err_sq);
    if (isfinite(snr)) {
        c->snr_sum += snr;
        c->snr_count++;
    }
    if (snr < c->res->snr_worst_db) {
        c->res->snr_worst_db = snr;
        snprintf(c->res->worst_tensor, sizeof c->res->worst_tensor, "%s", t->name);
    }
}

/* An fp8 or FP4 input's scales (one, where it has no scale tensor) into *buf, grown as needed,
 * and their layout into *L; the plan checked that they fit the weight. */
static feather_status read_scales(conv *c, const feather_plan_entry *e, float **buf, size_t *cap,
                                  feather_scale_layout *L) {
    feather_error *err = c->err;
    const void *sd = NULL;
    feather_quant_scales_of(c->r, e->tensor, e->scale, e->scale2, e->fp4, e->n, e->k, L);
    feather_status st = grow((void **)buf, cap, L->count * sizeof(float), err);
    if (st || (e->scale && (st = feather_tensor_data(c->r, e->scale, &sd, err)))) return st;
    const uint64_t bad = feather_scales_load(e->scale, sd, L, e->k, *buf);
    if (e->scale && bad < e->scale->nelem)
        return feather_fail(err, FEATHER_E_INVALID, "%s: tensor '%s': scale %llu is %g (must be finite and %s)",
                            feather_reader_path(c->r), e->scale->name, (unsigned long long)bad,
                            feather_scale_at(e->scale, sd, L, bad), feather_scales_are_bytes(L) ? "not negative" : "> 0");
    return FEATHER_OK;
}

/* Quantises on the conversion's device. On the GPU the codes come back into page-locked slots
 * and only the weights are copied by the host, which half the threads do at close to the
 * upload's speed; the other half stay with the writer and the input's hash, which run beside
 * (measured on a 16-core host: a crew of every thread made whole conversions slower). */
static feather_status quantize(conv *c, const feather_quant_options *qo, feather_dtype dt, const void *w,
                               uint64_t n, uint64_t k, int packed, feather_quant_stats *stats) {
    if (c->dev != FEATHER_DEVICE_GPU)
        return feather_quantize(c->ctx, qo, dt, w, n, k, packed, c->q, c->scales, stats, c->err);
    int copiers = feather_ctx_threads(c->ctx) / 2;
    return feather_gpu_quantize(c->ctx, copiers > 0 ? copiers : 1, qo, dt, w, n, k, packed, c->q, c->scales,
                                stats, c->err);
}

/* Makes slot's output buffer hold bytes, and makes it the one being produced. */
static feather_status take_buffer(conv *c, int slot, uint64_t bytes) {
    feather_status st = FEATHER_OK;
    if (c->dev == FEATHER_DEVICE_GPU && c->q_caps[slot] < bytes) {
        feather_host_free(c->qs[slot]);
        c->q_caps[slot] = 0;
        if (!(c->qs[slot] = feather_host_alloc(bytes)))
            return feather_fail(c->err, FEATHER_E_NOMEM, "out of memory (%llu bytes for one tensor)",
                                (unsigned long long)bytes);
        c->q_caps[slot] = bytes;
    } else if ((st = grow((void **)&c->qs[slot], &c->q_caps[slot], bytes, c->err))) {
        return st;
    }
    c->q = c->qs[slot];
    c->scales = c->ss[slot];
    return FEATHER_OK;
}

/* Reads a quantised input's scales into c->in_scales (an FP4 one's block scales; its tensor
 * scale goes into *g, see feather_fp4_tensor_scale) and makes c->wide hold rows f32 rows. */
static feather_status dequant_setup(conv *c, const feather_plan_entry *e, uint64_t rows, feather_scale_layout *L,
                                    float *g) {
    feather_status st = read_scales(c, e, &c->in_scales, &c->in_cap, L);
    if (st || (st = grow((void **)&c->wide, &c->w_cap, rows * e->k * sizeof(float), c->err))) return st;
    const void *d2 = NULL;
    *g = 1;
    if (e->scale2 && (st = feather_tensor_data(c->r, e->scale2, &d2, c->err))) return st;
    if (e->fp4 && feather_fp4_tensor_scale(e->tensor, e->scale2, d2, c->in_scales, L->count, g))
        return feather_fail(c->err, FEATHER_E_INVALID, "%s: tensor '%s': tensor scale %g (must be finite and > 0)",
                            feather_reader_path(c->r), e->scale2->name, *g);
    return FEATHER_OK;
}

/* Rows a strip of a quantised weight takes: about 512 KiB of f32, which stays in a core's cache
 * while one thread dequantises, searches and casts it. */
static uint64_t strip_rows(uint64_t k) {
    const uint64_t rows = ((uint64_t)512 << 10) / (4 * (k ? k : 1)) / 16 * 16;
    return rows > 16 ? rows : 16;
}

/* A quantised input weight, a strip of rows per task: each strip dequantised with the input's
 * scales and then rounded into bf16 (TO_BF16), kept in c->wide (TO_F32: the whole weight, for
 * the GPU), or requantised there by the thread that dequantised it (REQUANT: scales of its rows
 * searched, or the weight's one scale taken, and cast with that thread's one-thread context).
 * One scale for the weight takes two passes before: its largest magnitude (AMAX), then the
 * candidates' errors of each row (TOTALS). */
enum strip_work { TO_BF16, TO_F32, REQUANT, AMAX, TOTALS };

typedef struct strip_job {
    conv *c;
    const feather_plan_entry *e;
    const uint8_t *q;
    const feather_scale_layout *L;
    float g;
    uint64_t rows;
    enum strip_work what;
    uint16_t *bf16;
    const feather_quant_options *qo;
    int packed, search, counts;    /* counts: this pass counts the NaN/Inf values (the first) */
    uint64_t per_row;              /* output scales a row (0: one for the weight) */
    float *amax;                   /* AMAX: a strip's */
    const float *cs, *ci;          /* TOTALS: nr candidates */
    unsigned nr;
    float *rowtot;                 /* TOTALS: nr a row */
    feather_quant_stats *parts;    /* a strip's, summed in strip order; or NULL */
    _Atomic uint64_t nonfinite;    /* f32 values NaN or Inf once dequantised */
    atomic_int status;             /* the first failure's */
    int failed_worker;             /* whose error says why */
} strip_job;

static void strip_fn(void *arg, size_t b, size_t end, int worker) {
    strip_job *j = arg;
    conv *c = j->c;
    const feather_plan_entry *e = j->e;
    const uint64_t n = e->n, k = e->k;
    for (size_t s = b; s < end; s++) {
        const uint64_t r0 = s * j->rows, r1 = r0 + j->rows < n ? r0 + j->rows : n, len = (r1 - r0) * k;
        float *out = c->wide + (j->what == TO_F32 ? r0 : (uint64_t)worker * j->rows) * k;
        feather_dequantize_weight(feather_ctx_simd(c->ctx), j->q, e->tensor->dtype, e->tensor->ndim == 3, j->L, e->fp4,
                                  c->in_scales, j->g, n, k, r0, r1, out);
        if (j->what == TO_BF16) {
            for (uint64_t i = 0; i < len; i++) j->bf16[r0 * k + i] = feather_f32_to_bf16(out[i]);
            continue;
        }
        const uint64_t bad = j->counts ? feather_count_nonfinite(FEATHER_F32, out, (size_t)len) : 0;
        if (bad) atomic_fetch_add(&j->nonfinite, bad);
        /* once a value is refused, the rest are only counted */
        if (j->what == TO_F32 || atomic_load(&j->status) || (atomic_load(&j->nonfinite) && !j->qo->allow_nonfinite))
            continue;
        feather_error *err = &c->solo_errs[worker];
        feather_ctx *solo = c->solo[worker];
        float *sc = c->scales + r0 * j->per_row;
        feather_status st = FEATHER_OK;
        if (j->what == AMAX)
            st = feather_scale_tensor_part(solo, j->qo, out, r1 - r0, k, NULL, NULL, 0, &j->amax[s], NULL, err);
        else if (j->what == TOTALS)
            st = feather_scale_tensor_part(solo, j->qo, out, r1 - r0, k, j->cs, j->ci, j->nr, NULL,
                                           j->rowtot + r0 * j->nr, err);
        else if (j->search)
            st = feather_scale_search(solo, j->qo, FEATHER_F32, out, r1 - r0, k, sc, err);
        if (!st && j->what == REQUANT)
            st = feather_quantize_band(solo, j->qo, FEATHER_F32, out, r1 - r0, k, n, sc, j->packed,
                                       j->packed ? c->q + 16 * r0 : c->q + r0 * k, j->parts ? &j->parts[s] : NULL, err);
        int ok = FEATHER_OK;
        if (st && atomic_compare_exchange_strong(&j->status, &ok, (int)st)) j->failed_worker = worker;
    }
}

/* One pass over the strips; j->nonfinite goes on adding up from pass to pass. */
static feather_status run_strips(conv *c, strip_job *j) {
    atomic_init(&j->status, 0);
    feather_parallel_for(c->ctx, (size_t)((j->e->n + j->rows - 1) / j->rows), 1, strip_fn, j);
    const feather_status st = (feather_status)atomic_load(&j->status);
    if (st) *c->err = c->solo_errs[j->failed_worker];
    return st;
}

/* A one-thread context and an error for each of the context's threads, made once. */
static feather_status solo_contexts(conv *c) {
    const int t = feather_ctx_threads(c->ctx);
    if (c->solo) return FEATHER_OK;
    c->solo = calloc((size_t)t, sizeof *c->solo);
    c->solo_errs = calloc((size_t)t, sizeof *c->solo_errs);
    for (int i = 0; c->solo && i < t; i++) {
        if (!(c->solo[i] = feather_ctx_new(1))) break;
        feather_ctx_set_simd(c->solo[i], feather_ctx_simd(c->ctx));
        c->nsolo = i + 1;
    }
    if (c->nsolo < t || !c->solo_errs) return feather_fail(c->err, FEATHER_E_NOMEM, "out of memory for threads");
    return FEATHER_OK;
}

/* DEQUANT: the fp8 weight as BF16 [N, K] into slot. */
static feather_status produce_bf16(conv *c, const feather_plan_entry *e, const void *data, int slot) {
    feather_scale_layout L;
    const uint64_t rows = strip_rows(e->k);
    strip_job j = {.c = c, .e = e, .q = data, .L = &L, .rows = rows, .what = TO_BF16};
    feather_status st = take_buffer(c, slot, 2 * e->n * e->k);
    if (st || (st = dequant_setup(c, e, (uint64_t)feather_ctx_threads(c->ctx) * rows, &L, &j.g))) return st;
    j.bf16 = (uint16_t *)c->q;
    atomic_init(&j.nonfinite, 0);
    return run_strips(c, &j);
}

/* The one scale of a requantised weight (tensor or absmax) into c->scales[0], from its strips:
 * their largest magnitude, then each row's errors of the candidates. The NaN/Inf values are
 * counted in the first pass; where they are refused the scale is left unsearched. */
static feather_status one_scale(conv *c, strip_job *j, size_t strips) {
    feather_status st = FEATHER_OK;
    const uint64_t n = j->e->n;
    float cs[FEATHER_GRID_MAX], ci[FEATHER_GRID_MAX];
    if (!(j->amax = calloc(strips, sizeof *j->amax))) return feather_fail(c->err, FEATHER_E_NOMEM, "out of memory");
    j->what = AMAX;
    st = run_strips(c, j);
    float amax = 0;
    for (size_t s = 0; s < strips; s++) amax = j->amax[s] > amax ? j->amax[s] : amax;
    free(j->amax);
    j->amax = NULL;
    j->counts = 0;
    if (st || (atomic_load(&j->nonfinite) && !j->qo->allow_nonfinite)) return st;
    j->nr = feather_scale_tensor_cands(feather_ctx_simd(c->ctx), j->qo, amax, cs, ci, &c->scales[0]);
    if (j->nr) {
        if (!(j->rowtot = malloc(n * j->nr * sizeof *j->rowtot)))
            return feather_fail(c->err, FEATHER_E_NOMEM, "out of memory");
        j->cs = cs;
        j->ci = ci;
        j->what = TOTALS;
        if (!(st = run_strips(c, j))) c->scales[0] = feather_scale_tensor_pick(cs, j->rowtot, n, j->nr);
        free(j->rowtot);
        j->rowtot = NULL;
        j->cs = j->ci = NULL;
    }
    j->what = REQUANT;
    return st;
}

/* REQUANT: an fp8 or FP4 weight dequantised with its scales, then quantised like an f32 one.
 * The CPU takes a strip of rows at a time, each on one thread from its dequantisation to its
 * codes (one scale for the weight is found first, in two passes over the strips, each
 * dequantising them again), with the same codes and scales as the whole weight; the GPU takes the
 * whole weight in f32 (as do FP4 blocks kept, which need no search). */
static feather_status requantize(conv *c, const feather_plan_entry *e, const void *data, int slot,
                                 feather_quant_options *qo, int packed, feather_quant_stats *stats) {
    feather_error *err = c->err;
    const uint64_t n = e->n, k = e->k, count = feather_scale_count(qo, n, k);
    const int keeps = feather_fp4_keeps_blocks(qo, e->fp4), none = qo->mode == FEATHER_SCALE_NONE;
    const int by_rows = keeps || c->dev != FEATHER_DEVICE_GPU;
    const int one = qo->mode == FEATHER_SCALE_TENSOR || qo->mode == FEATHER_SCALE_ABSMAX;
    feather_scale_layout L;
    strip_job j = {.c = c, .e = e, .q = data, .L = &L, .rows = strip_rows(k), .what = by_rows ? REQUANT : TO_F32,
                   .qo = qo, .packed = packed, .search = !keeps && !none && !one, .counts = 1,
                   .per_row = none || one ? 0 : count / n};
    feather_status st =
        dequant_setup(c, e, by_rows ? (uint64_t)feather_ctx_threads(c->ctx) * j.rows : n, &L, &j.g);
    if (st || (st = grow((void **)&c->scales, &c->s_caps[slot], count * sizeof(float), err))) return st;
    c->ss[slot] = c->scales;
    if (keeps) {
        /* Its scales are the input's, each spread over the groups of its block (a block of
         * zeros, scale 0, takes 1); no search, so the same on every device. */
        const uint64_t per = e->fp4 / qo->group;
        for (uint64_t i = 0; i < count; i++) {
            const float s = c->in_scales[i / per] * j.g;
            c->scales[i] = s > 0 ? s : 1.0f;
        }
    }
    if (none) c->scales[0] = 1.0f;
    const size_t strips = (size_t)((n + j.rows - 1) / j.rows);
    if (by_rows && ((st = solo_contexts(c)) || (stats && !(j.parts = calloc(strips, sizeof *j.parts)))))
        return st ? st : feather_fail(err, FEATHER_E_NOMEM, "out of memory for statistics");
    atomic_init(&j.nonfinite, 0);
    if (by_rows && one) st = one_scale(c, &j, strips);
    if (!st && !(atomic_load(&j.nonfinite) && !qo->allow_nonfinite)) st = run_strips(c, &j);
    const uint64_t nonfinite = atomic_load(&j.nonfinite);
    if (!st && nonfinite && !qo->allow_nonfinite) {
        char pre[320];
        st = feather_fail_nonfinite(err, feather_tensor_prefix(e->tensor->name, pre, sizeof pre), nonfinite,
                                    "values once dequantised with its scales");
    }
    if (!st && !by_rows) {
        if (stats) memset(stats, 0, sizeof *stats);
        st = quantize(c, qo, FEATHER_F32, c->wide, n, k, packed, stats);
    } else if (!st && stats) {
        /* in strip order: the same sums for any thread count */
        memset(stats, 0, sizeof *stats);
        for (size_t s = 0; s < strips; s++) {
            stats->sum_sq += j.parts[s].sum_sq;
            stats->err_sq += j.parts[s].err_sq;
            stats->nonfinite += j.parts[s].nonfinite;
            if (j.parts[s].max_abs_err > stats->max_abs_err) stats->max_abs_err = j.parts[s].max_abs_err;
        }
    }
    free(j.parts);
    return st ? feather_fail_prefix(err, st, "%s", feather_reader_path(c->r)) : FEATHER_OK;
}

/* A repacked weight's codes of Inf or NaN would reach the output as they are, where the verifier
 * and every loader take them for a broken file: refused as a cast refuses them, or with
 * allow_nonfinite mapped as a cast maps them (NaN to 0, Inf to ±max). */
static feather_status repacked_codes(conv *c, const feather_plan_entry *e, const feather_quant_options *qo) {
    const feather_fp8 fmt = feather_fp8_of(e->tensor->dtype);
    const uint64_t nk = e->n * e->k;
    vrows_kernels kern;
    feather_vrows_kernels(feather_ctx_simd(c->ctx), &kern);
    const uint64_t bad = kern.bad_codes(c->q, nk, fmt);
    if (!bad) return FEATHER_OK;
    if (!qo->allow_nonfinite) {
        char pre[FEATHER_ERROR_MAX], t[320];
        snprintf(pre, sizeof pre, "%s: %s", feather_reader_path(c->r), feather_tensor_prefix(e->tensor->name, t, sizeof t));
        return feather_fail_nonfinite(c->err, pre, bad, "codes");
    }
    /* through the codec and back: a finite code comes back as itself, the others as the cast
     * maps them */
    for (uint64_t i = 0; i < nk; i++) c->q[i] = feather_f32_to_fp8(feather_fp8_to_f32(c->q[i], fmt), fmt);
    warn_mapped(c->res, e->tensor->name, bad);
    return FEATHER_OK;
}

/* Produces the fp8 bytes (in the output layout) and scales of one selected tensor into slot. */
static feather_status produce(conv *c, const feather_plan_entry *e, const void *data, int slot) {
    feather_error *err = c->err;
    const feather_tensor *t = e->tensor;
    uint64_t nk = e->n * e->k;
    int packed = c->o->layout == FEATHER_LAYOUT_PACKED;
    feather_status st = take_buffer(c, slot, nk);
    if (st) return st;
    size_t *s_cap = &c->s_caps[slot];
    feather_quant_options qo = c->o->quant;
    qo.name = t->name;
    feather_quant_stats stats;
    int in_packed = t->ndim == 3;

    if (e->action == FEATHER_REPACK) {
        feather_scale_layout L;
        st = read_scales(c, e, &c->scales, s_cap, &L);
        c->ss[slot] = c->scales;
        if (st) return st;
        if (in_packed == packed) memcpy(c->q, data, nk);
        else if (packed) feather_pack(data, e->n, e->k, c->q);
        else feather_unpack(data, e->n, e->k, c->q);
        return repacked_codes(c, e, &qo);
    }
    feather_quant_stats *sp = c->o->no_snr ? NULL : &stats;
    if (e->action == FEATHER_CONVERT) {
        st = grow((void **)&c->scales, s_cap, feather_scale_count(&qo, e->n, e->k) * sizeof(float), err);
        c->ss[slot] = c->scales;
        if (!st && sp) memset(sp, 0, sizeof *sp);
        if (!st && (st = quantize(c, &qo, t->dtype, data, e->n, e->k, packed, sp)))
            st = feather_fail_prefix(err, st, "%s", feather_reader_path(c->r));
    } else {
        st = requantize(c, e, data, slot, &qo, packed, sp);
    }
    if (st || !sp) return st;
    if (stats.nonfinite)
        warn_mapped(c->res, t->name, stats.nonfinite);
    note_snr(c, t, &stats);
    return FEATHER_OK;
}

static void progress(conv *c, const char *name) {
    if (c->o->progress) c->o->progress(c->o->progress_arg, c->done, c->total, name);
}

/* ---------------------------------------------------------------- the writer thread
 *
 * The main thread reads, hashes and quantises tensor i+1 while this thread hashes and writes
 * tensor i: conversion time approaches max(compute, I/O) instead of their sum. Jobs are taken
 * in order; a job may free an output slot and release the input tensor's pages once written. */

#define MAX_JOBS 16

typedef struct wjob {
    const void *data;
    uint64_t len;
    const feather_tensor *release; /* input tensor whose pages can go after this job */
    int slot;                      /* output slot that is free again after this job, or -1 */
} wjob;

typedef struct wpipe {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    wjob jobs[MAX_JOBS];
    unsigned head, tail;           /* jobs [head, tail) are queued */
    int slot_busy[2];
    int done;                      /* no more jobs */
    feather_status st;             /* first write error */
    feather_error err;
    feather_writer *w;
    feather_reader *r;
} wpipe;

static void *writer_main(void *arg) {
    wpipe *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->head == p->tail && !p->done) pthread_cond_wait(&p->cv, &p->mu);
        if (p->head == p->tail) break;
        wjob j = p->jobs[p->head % MAX_JOBS];
        feather_status failed = p->st;
        pthread_mutex_unlock(&p->mu);
        feather_status st = failed ? failed : feather_writer_write(p->w, j.data, j.len, &p->err);
        if (j.release) feather_tensor_release(p->r, j.release);
        pthread_mutex_lock(&p->mu);
        if (st && !p->st) p->st = st;
        if (j.slot >= 0) p->slot_busy[j.slot] = 0;
        p->head++;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Queues a job; returns the writer's error if it already failed. */
static feather_status push_job(wpipe *p, wjob j) {
    pthread_mutex_lock(&p->mu);
    while (p->tail - p->head == MAX_JOBS && !p->st) pthread_cond_wait(&p->cv, &p->mu);
    feather_status st = p->st;
    if (!st) {
        p->jobs[p->tail++ % MAX_JOBS] = j;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* Waits until slot is free (its last job written); returns the writer's error if any. */
static feather_status take_slot(wpipe *p, int slot) {
    pthread_mutex_lock(&p->mu);
    while (p->slot_busy[slot] && !p->st) pthread_cond_wait(&p->cv, &p->mu);
    p->slot_busy[slot] = 1;
    feather_status st = p->st;
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* Lets the thread drain the queue and stop; returns the first write error. */
static feather_status finish_pipe(wpipe *p, feather_error *err) {
    pthread_mutex_lock(&p->mu);
    p->done = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    if (p->st && err) *err = p->err;
    return p->st;
}

/* The input's hash runs on one thread, in file order. On the CPU it goes before each tensor's
 * quantisation; on the GPU, where the converting thread mostly waits, beside it. */
typedef struct hash_job {
    feather_shard_hasher *h;
    feather_reader *r;
    const void *data;
    size_t len;
} hash_job;

static void *hash_main(void *arg) {
    hash_job *j = arg;
    feather_shard_hasher_feed(j->h, j->r, j->data, j->len);
    return NULL;
}

static feather_status convert_shard(conv *c, unsigned shard, feather_writer *w) {
    feather_error *err = c->err;
    feather_status st = FEATHER_OK;
    feather_shard_hasher h;
    if ((st = feather_shard_hasher_begin(&h, c->r, shard, err))) {
        feather_shard_hasher_free(&h);
        return st;
    }
    wpipe p = {.w = w, .r = c->r};
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    if (pthread_create(&p.thread, NULL, writer_main, &p)) {
        feather_shard_hasher_free(&h);
        return feather_fail(err, FEATHER_E_NOMEM, "cannot start the writer thread");
    }
    const char *cq = comfy_quant_json(c->o->quant.format);
    int slot = 0;
    size_t n = feather_plan_count(c->plan);
    for (size_t i = 0; i < n && !st; i++) {
        const feather_plan_entry *e = feather_plan_at(c->plan, i);
        const feather_tensor *t = e->tensor;
        if (t->shard != shard) continue;
        if (feather_cancelled()) { st = feather_fail(err, FEATHER_E_CANCELLED, "interrupted"); break; }
        /* Ask for the next tensor's pages while this one is processed. */
        for (size_t j = i + 1; j < n; j++)
            if (feather_plan_at(c->plan, j)->tensor->shard == shard) {
                feather_tensor_prefetch(c->r, feather_plan_at(c->plan, j)->tensor);
                break;
            }
        const void *data;
        if ((st = feather_tensor_data(c->r, t, &data, err))) break;
        hash_job hj = {&h, c->r, data, (size_t)t->nbytes};
        pthread_t hasher;
        int hashing = c->dev == FEATHER_DEVICE_GPU && converted(e) && t->nbytes >= ((uint64_t)1 << 20) &&
                      pthread_create(&hasher, NULL, hash_main, &hj) == 0;
        if (!hashing) hash_main(&hj);
        if (e->action == FEATHER_KEEP) {
            /* Zero-copy: the mapped bytes go straight to the writer. */
            st = push_job(&p, (wjob){data, t->nbytes, t, -1});
            c->res->tensors_kept++;
        } else if (e->action == FEATHER_DROP) {
            feather_tensor_release(c->r, t);
        } else if (e->action == FEATHER_DEQUANT) {
            if ((st = take_slot(&p, slot))) break;
            st = produce_bf16(c, e, data, slot);
            feather_tensor_release(c->r, t);
            if (!st) st = push_job(&p, (wjob){c->q, 2 * e->n * e->k, NULL, slot});
            slot ^= 1;
            c->res->tensors_kept++;
        } else {
            if ((st = take_slot(&p, slot))) {
                if (hashing) pthread_join(hasher, NULL);
                break;
            }
            st = produce(c, e, data, slot);
            if (hashing) pthread_join(hasher, NULL);
            /* The input is no longer needed: at most one input tensor and the two output slots
             * are resident at any time. */
            feather_tensor_release(c->r, t);
            if (st) break;
            int comfy = c->o->layout == FEATHER_LAYOUT_COMFY;
            st = push_job(&p, (wjob){c->q, e->n * e->k, NULL, -1});
            if (!st) st = push_job(&p, (wjob){c->scales, out_scale_count(c, e) * sizeof(float), NULL, comfy ? -1 : slot});
            if (!st && comfy) st = push_job(&p, (wjob){cq, strlen(cq), NULL, slot});
            slot ^= 1;
            c->res->tensors_converted++;
        }
        c->done += t->nbytes;
        progress(c, t->name);
    }
    /* A write error is the root cause of anything that failed after it. */
    feather_error werr = {0};
    feather_status wst = finish_pipe(&p, &werr);
    if (wst) {
        st = wst;
        if (err) *err = werr;
    }
    uint64_t digest;
    if (!st && !(st = feather_shard_hasher_finish(&h, c->r, &digest, err))) {
        char hex[17];
        st = feather_writer_metadata_fill(w, "feather.source_xxh3", hex64(digest, hex), err);
    }
    feather_shard_hasher_free(&h);
    return st;
}

/* ---------------------------------------------------------------- outputs */

/* Output path of each input shard: the named output for a single file; for sharded models the
 * shards sit beside the output index, named after the input shards. */
static feather_status shard_output(conv *c, const char *output, unsigned shard, char *buf, size_t len) {
    if (feather_shard_count(c->r) == 1 && !feather_ends_with(output, ".index.json")) {
        snprintf(buf, len, "%s", output);
        return FEATHER_OK;
    }
    char dir[4096], stem[1024];
    int index;
    stem_of(feather_shard_path(c->r, shard), stem, sizeof stem, &index);
    const char *tag = c->o->quant.format == FEATHER_FP8_E5M2 ? "fp8e5m2" : "fp8e4m3fn";
    int n = feather_dir_of(output, dir, sizeof dir) ? -1 : snprintf(buf, len, "%s/%s-%s.safetensors", dir, stem, tag);
    if (n < 0 || (size_t)n >= len) return feather_fail(c->err, FEATHER_E_ARG, "%s: output path too long", output);
    return FEATHER_OK;
}

/* Whether name is one the output gives a converted weight's scale or ComfyUI tag: an input's
 * scale or tag it drops may have had the same name (X.weight_scale). */
static int written_beside(const conv *c, const char *name) {
    static const char *const tails[] = {".weight_scale", ".comfy_quant"};
    for (int i = 0; i < 2; i++) {
        if (!feather_ends_with(name, tails[i]) || (i == 1 && c->o->layout != FEATHER_LAYOUT_COMFY)) continue;
        char w[4200];
        snprintf(w, sizeof w, "%.*s.weight", (int)(strlen(name) - strlen(tails[i])), name);
        const feather_plan_entry *e = feather_plan_find(c->plan, c->r, w);
        return e && converted(e);
    }
    return 0;
}

/* Does the existing output hold what this plan makes of every tensor: converted ones in the
 * target fp8 dtype, dequantised ones in BF16, kept ones as they are, dropped ones not at all? The
 * options name a preset, not its rules: a file made before a preset changed what it keeps says
 * so here. */
static int same_selection(const conv *c, feather_reader *out) {
    for (size_t i = 0; i < feather_plan_count(c->plan); i++) {
        const feather_plan_entry *e = feather_plan_at(c->plan, i);
        const feather_tensor *t = feather_find(out, e->name);
        if (e->action == FEATHER_DROP ? t && !written_beside(c, e->name) : !t || t->dtype != out_dtype(c, e)) return 0;
    }
    return 1;
}

/* Is the existing output up to date: made from an input with the same XXH3 and the same
 * options, with the same selection? Reads the input once when the cheap checks pass. */
static feather_status up_to_date(conv *c, const char *output, int *yes) {
    *yes = 0;
    feather_reader *o;
    feather_error e2;
    if (feather_open(&o, output, FEATHER_OPEN_HEADER_ONLY, &e2)) return FEATHER_OK;
    feather_status st = FEATHER_OK;
    unsigned ns = feather_shard_count(c->r);
    if (feather_shard_count(o) != ns) goto done;
    for (unsigned s = 0; s < ns; s++) {
        const char *opt = feather_metadata_get(o, s, "feather.options");
        const char *src = feather_metadata_get(o, s, "feather.source_xxh3");
        if (!opt || !src || strcmp(opt, c->options)) goto done;
    }
    if (!same_selection(c, o)) goto done;
    for (unsigned s = 0; s < ns; s++) {
        uint64_t hsh = 0;
        char hex[17];
        if ((st = feather_shard_xxh3(c->r, s, &hsh, c->err))) goto done;
        if (strcmp(feather_metadata_get(o, s, "feather.source_xxh3"), hex64(hsh, hex))) goto done;
    }
    *yes = 1;
done:
    feather_close(o);
    return st;
}

/* Writes the sharded model's index atomically (temporary file, fsync, rename). */
static feather_status write_index(conv *c, const char *output, char **shard_paths) {
    feather_error *err = c->err;
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_CreateObject(), *map = cJSON_CreateObject();
    uint64_t total = 0;
    for (unsigned s = 0; s < feather_shard_count(c->r); s++) {
        const char *base = strrchr(shard_paths[s], '/');
        base = base ? base + 1 : shard_paths[s];
        for (size_t i = 0; i < feather_plan_count(c->plan); i++) {
            const feather_plan_entry *e = feather_plan_at(c->plan, i);
            if (e->tensor->shard != s || e->action == FEATHER_DROP) continue;
            total += e->bytes_out;
            cJSON_AddStringToObject(map, e->name, base);
            if (!converted(e)) continue;
            char scale[4200], tag[4200];
            companion_names(e, scale, tag);
            cJSON_AddStringToObject(map, scale, base);
            if (c->o->layout == FEATHER_LAYOUT_COMFY) cJSON_AddStringToObject(map, tag, base);
        }
    }
    cJSON_AddNumberToObject(meta, "total_size", (double)total);
    cJSON_AddStringToObject(meta, "feather.options", c->options);
    cJSON_AddItemToObject(root, "metadata", meta);
    cJSON_AddItemToObject(root, "weight_map", map);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
    /* text and its newline, written like the shards (no name until whole, fsync'd, published;
     * mode 0666 less the umask), replacing an older index: its existence was weighed before
     * converting */
    const size_t len = strlen(text);
    text[len] = '\n'; /* cJSON_Print's terminator, no longer needed */
    feather_write_options wo = {.overwrite = 1};
    feather_status st = feather_write_file(output, text, len + 1, &wo, err);
    free(text);
    return st;
}

/* From 8 cores on, the CPU's search keeps up with the reader, the hash and the writer, and the
 * GPU's host copies only take threads from them (H100 host, a 5 GB bf16 checkpoint from the page
 * cache, confined to J cores, block:128 / channel / tensor, GPU against CPU: J = 2 2.2 / 1.7 /
 * 1.03× faster, 4 1.7 / 1.2 / 1.03×, 8 1.01 / 0.95 / 0.82×, 16 0.93 / 0.90 / 0.69×; eight 1 GB
 * files at once through samples/batch-convert.sh on the 16 cores: the CPU 1.2–1.7× faster at
 * every -j). Below 8, the GPU's start-up (0.3 s a process) is won back from about half a
 * gigabyte per core with channel and block scales (block:128, CPU / GPU seconds: 1.1 GB on 2
 * cores 1.09 / 1.06, on 4 0.89 / 0.88; 2.1 GB on 1 core 4.39 / 2.38, on 4 1.64 / 1.46; 32 MB
 * 0.03 / 0.32 on either), never by much with a whole-tensor scale (1.1 GB on 4 cores 0.54 / 1.03
 * s, 3.1 GB on 1 core 3.09 / 2.75). Looking for a GPU costs that start-up, so it is not done
 * where the CPU is taken. BENCHMARKS.md, "GPU-assisted conversion". */
#define GPU_MIN_BYTES_PER_CORE 500000000ull

feather_device feather_convert_device(feather_device want, feather_scale_mode mode, uint64_t bytes) {
    if (want != FEATHER_DEVICE_AUTO) return want;
    const int cores = feather_cores();
    const int searched = mode == FEATHER_SCALE_CHANNEL || mode == FEATHER_SCALE_BLOCK;
    return cores < 8 && searched && bytes >= (uint64_t)cores * GPU_MIN_BYTES_PER_CORE ? FEATHER_DEVICE_AUTO
                                                                                        : FEATHER_DEVICE_CPU;
}

/* The weights the plan quantises: converted and requantised tensors (a repack moves bytes only). */
static uint64_t quantised_bytes(const feather_plan *plan) {
    uint64_t n = 0;
    for (size_t i = 0; i < feather_plan_count(plan); i++) {
        const feather_plan_entry *e = feather_plan_at(plan, i);
        if (e->action == FEATHER_CONVERT || e->action == FEATHER_REQUANT) n += e->tensor->nbytes;
    }
    return n;
}

feather_status feather_convert(feather_ctx *ctx, const char *input, const char *output,
                               const feather_convert_options *o, feather_convert_result *res,
                               feather_error *err) {
    double t0 = feather_now_s();
    memset(res, 0, sizeof *res);
    res->snr_worst_db = INFINITY;
    snprintf(res->output, sizeof res->output, "%s", output);
    /* A GPU that is asked for but missing fails before anything is opened or written. AUTO
     * decides once the plan says how much is quantised (below). */
    conv c = {.ctx = ctx, .o = o, .res = res, .err = err, .dev = FEATHER_DEVICE_CPU};
    feather_status st = FEATHER_OK;
    if (o->device == FEATHER_DEVICE_GPU && (st = feather_device_select(o->device, &c.dev, NULL, NULL, 0, err)))
        return st;
    st = feather_open(&c.r, input, 0, err);
    if (st) return st;
    if ((st = feather_plan_new(&c.plan, c.r, o, err))) goto out_reader;
    if ((st = feather_plan_check(c.plan, err))) goto out_plan;
    options_string(o, feather_plan_preset(c.plan), c.options, sizeof c.options);
    snprintf(res->preset, sizeof res->preset, "%s", feather_plan_preset(c.plan));
    /* One warning for each kind, however many layers (the first one named). */
    size_t nreq = 0, ndeq = 0, nother = 0, nnv = 0;
    const feather_tensor *first_req = NULL, *first_deq = NULL, *first_other = NULL;
    for (size_t i = 0; i < feather_plan_count(c.plan); i++) {
        const feather_plan_entry *e = feather_plan_at(c.plan, i);
        const feather_tensor *t = e->tensor;
        c.total += t->nbytes;
        if (e->action == FEATHER_REQUANT && !feather_fp4_keeps_blocks(&o->quant, e->fp4) && !nreq++) first_req = t;
        nnv += e->action == FEATHER_REQUANT && e->fp4 && !feather_fp4_keeps_blocks(&o->quant, e->fp4);
        if (e->action == FEATHER_DEQUANT && !ndeq++) first_deq = t;
        if (o->layout == FEATHER_LAYOUT_PACKED && other_quantised(c.r, e) && !nother++) first_other = t;
    }
    if (nreq)
        warn(res, "%zu quantised layer%s (%s: %s%s) requantised to %s: the rounding errors add up%s", nreq,
             nreq == 1 ? "" : "s", first_req->name, feather_dtype_name(first_req->dtype), nreq > 1 ? ", …" : "",
             feather_fp8_name(o->quant.format),
             nnv && o->layout == FEATHER_LAYOUT_PACKED ? " (NVFP4 and MXFP4 layers keep their own blocks at --scale block:16)" : "");
    if (ndeq)
        warn(res, "%zu quantised layer%s not converted (%s%s) dequantised to BF16: the output's loader would run %s, "
                  "without %s (see --plan)",
             ndeq, ndeq == 1 ? "" : "s", first_deq->name, ndeq > 1 ? ", …" : "",
             ndeq == 1 ? "it as a plain weight" : "them as plain weights", ndeq == 1 ? "its scale" : "their scales");
    if (nother)
        warn(res, "%zu layer%s quantised in a format feather does not read (%s: %s%s) kept as %s: the packed "
                  "layout's loader would run %s",
             nother, nother == 1 ? "" : "s", first_other->name, feather_dtype_name(first_other->dtype),
             nother > 1 ? ", …" : "", nother == 1 ? "it is" : "they are",
             nother == 1 ? "it as a plain weight" : "them as plain weights");
    res->bytes_in = feather_plan_bytes_in(c.plan);
    res->bytes_out = feather_plan_bytes_out(c.plan);

    int sharded = feather_shard_count(c.r) > 1 || feather_ends_with(output, ".index.json");
    struct stat sb, si;
    if (stat(output, &sb) == 0)
        for (unsigned s = 0; s <= feather_shard_count(c.r); s++) {
            const char *p = s ? feather_shard_path(c.r, s - 1) : input;
            if (stat(p, &si) == 0 && si.st_dev == sb.st_dev && si.st_ino == sb.st_ino) {
                st = feather_fail(err, FEATHER_E_ARG, "%s: the output is the input file %s", output, p);
                goto out_plan;
            }
        }
    if (!o->overwrite && stat(output, &sb) == 0) {
        int fresh;
        if ((st = up_to_date(&c, output, &fresh))) goto out_plan;
        if (fresh) {
            res->skipped = 1;
            goto out_plan;
        }
        st = feather_fail(err, FEATHER_E_EXISTS,
                          "%s: output exists and was not made from this input with these options and rules (use --force to "
                          "replace it)",
                          output);
        goto out_plan;
    }

    /* AUTO without a usable GPU converts on the CPU and says why in the result (programs print
     * it: see feather-convert). */
    if (o->device == FEATHER_DEVICE_AUTO) {
        int fell_back = 0;
        st = feather_device_select(feather_convert_device(o->device, o->quant.mode, quantised_bytes(c.plan)), &c.dev, &fell_back,
                                   res->gpu_fallback, sizeof res->gpu_fallback, err);
        if (st) goto out_plan;
        if (!fell_back) res->gpu_fallback[0] = 0;
    }
    res->used_gpu = c.dev == FEATHER_DEVICE_GPU;

    unsigned ns = feather_shard_count(c.r);
    feather_writer **w = calloc(ns, sizeof *w);
    char **paths = calloc(ns, sizeof *paths);
    const char **inputs = calloc(ns + 1, sizeof *inputs);
    if (!w || !paths || !inputs) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto out_w; }
    inputs[0] = input;
    for (unsigned s = 0; s < ns; s++) inputs[s + 1] = feather_shard_path(c.r, s);
    for (unsigned s = 0; s < ns && !st; s++) {
        char path[4200];
        if ((st = shard_output(&c, output, s, path, sizeof path))) break;
        if (!(paths[s] = strdup(path))) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); break; }
        feather_write_options wo = {.zstd_level = o->zstd_level, .zstd_threads = o->zstd_threads,
                                    .overwrite = o->overwrite, .inputs = inputs, .ninputs = ns + 1};
        if ((st = feather_writer_open(&w[s], path, &wo, err))) break;
        if ((st = declare_metadata(&c, w[s], s))) break;
        for (size_t i = 0; i < feather_plan_count(c.plan) && !st; i++) {
            const feather_plan_entry *e = feather_plan_at(c.plan, i);
            if (e->tensor->shard == s) st = declare_entry(&c, w[s], e);
        }
        if (!st) st = feather_writer_begin(w[s], err);
    }
    for (unsigned s = 0; s < ns && !st; s++) st = convert_shard(&c, s, w[s]);
    /* Everything produced: now, and only now, the outputs take their final names. */
    unsigned committed = 0;
    for (unsigned s = 0; s < ns; s++) {
        if (!w[s]) continue;
        if (st) feather_writer_abort(w[s]);                    /* commit and abort both free */
        else if (!(st = feather_writer_commit(w[s], err))) committed = s + 1;
        w[s] = NULL;
    }
    if (!st && sharded) st = write_index(&c, output, paths);
    if (st) /* a sharded model is whole or absent: remove the shards this run renamed */
        for (unsigned s = 0; s < committed; s++) unlink(paths[s]);
    if (!st) res->snr_mean_db = c.snr_count ? c.snr_sum / (double)c.snr_count : NAN;
    if (o->no_snr) res->snr_mean_db = res->snr_worst_db = NAN;
out_w:
    for (unsigned s = 0; w && s < ns; s++) if (w[s]) feather_writer_abort(w[s]);
    for (unsigned s = 0; paths && s < ns; s++) free(paths[s]);
    free(w);
    free(paths);
    free(inputs);
out_plan:
    feather_plan_free(c.plan);
out_reader:
    feather_close(c.r);
    for (int i = 0; i < 2; i++) {
        if (c.dev == FEATHER_DEVICE_GPU) feather_host_free(c.qs[i]);
        else free(c.qs[i]);
        free(c.ss[i]);
    }
    free(c.wide);
    free(c.in_scales);
    for (int i = 0; i < c.nsolo; i++) feather_ctx_free(c.solo[i]);
    free(c.solo);
    free(c.solo_errs);
    res->seconds = feather_now_s() - t0;
    return st;
}

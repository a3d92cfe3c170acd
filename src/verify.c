/* Verification: integrity of a converted checkpoint, and its error against the original.
 *
 * Integrity needs no reference: header, metadata consistent with the tensors, every tensor's
 * recorded XXH3, no Inf/NaN fp8 codes, finite positive scales. With the original, each
 * converted weight is measured in weight space (dequantised vs original) and in output space:
 * the checkpoint's own matmul (feather_gemm: fp16 activations × e5m2 weight, fp32 sums) against
 * an fp32 product with the original weight. Kept tensors must equal the original's bytes.
 *
 * Figures are summed over fixed blocks of rows and combined in block order, so a report does
 * not depend on the number of threads. */
#include "internal.h"
#include "feather/convert.h"
#include "feather/verify.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#define ROW_BLOCK 32

void feather_verify_defaults(feather_verify_options *o) {
    memset(o, 0, sizeof *o);
    o->tokens = 16;
    o->seed = 1;
    o->min_snr_db = NAN;
    o->max_rel_err = NAN;
}

void feather_verify_report_free(feather_verify_report *r) {
    if (!r) return;
    free(r->tensors);
    free(r);
}

static void problem(feather_verify_tensor *t, const char *fmt, ...) FEATHER_PRINTF(2, 3);
static void problem(feather_verify_tensor *t, const char *fmt, ...) {
    if (t->problem[0]) return; /* the first problem found is the one reported */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->problem, sizeof t->problem, fmt, ap);
    va_end(ap);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- the file's description */

typedef struct layout_info {
    int packed;
    feather_fp8 fmt;
    cJSON *tensors; /* feather.tensors */
} layout_info;

static int parse_layout(feather_reader *r, unsigned shard, layout_info *li, char *why, size_t len) {
    memset(li, 0, sizeof *li);
    const char *f = feather_metadata_get(r, shard, "feather.format");
    char want[64];
    snprintf(want, sizeof want, "%s/%d", FEATHER_FORMAT_NAME, FEATHER_FORMAT_VERSION);
    if (!f) { snprintf(why, len, "not a feather output (no feather.format metadata)"); return -1; }
    if (strcmp(f, want)) { snprintf(why, len, "feather.format is '%.40s', this tool reads '%s'", f, want); return -1; }
    const char *l = feather_metadata_get(r, shard, "feather.layout");
    if (!l || (strcmp(l, "packed") && strcmp(l, "comfy"))) { snprintf(why, len, "feather.layout is missing or unknown"); return -1; }
    li->packed = !strcmp(l, "packed");
    const char *p = feather_metadata_get(r, shard, "feather.fp8");
    if (!p || (strcmp(p, "e5m2") && strcmp(p, "e4m3fn"))) { snprintf(why, len, "feather.fp8 is missing or unknown"); return -1; }
    li->fmt = !strcmp(p, "e5m2") ? FEATHER_FP8_E5M2 : FEATHER_FP8_E4M3FN;
    const char *t = feather_metadata_get(r, shard, "feather.tensors");
    li->tensors = t ? cJSON_Parse(t) : NULL;
    if (!li->tensors || !cJSON_IsObject(li->tensors)) {
        cJSON_Delete(li->tensors);
        li->tensors = NULL;
        snprintf(why, len, "feather.tensors is missing or not a JSON object");
        return -1;
    }
    return 0;
}

/* The recorded original shape of a converted weight: 0 when it is not listed. */
static int recorded_shape(const layout_info *li, const char *name, uint64_t *n, uint64_t *k) {
    cJSON *e = cJSON_GetObjectItemCaseSensitive(li->tensors, name);
    cJSON *sh = e ? cJSON_GetObjectItemCaseSensitive(e, "shape") : NULL;
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) != 2) return 0;
    double a = cJSON_GetArrayItem(sh, 0)->valuedouble, b = cJSON_GetArrayItem(sh, 1)->valuedouble;
    if (!(a >= 1 && b >= 1 && a < 9e15 && b < 9e15)) return 0;
    *n = (uint64_t)a;
    *k = (uint64_t)b;
    return 1;
}

/* The weight's scale mode, from the number of scales its scale tensor holds. */
static int scale_mode_of(uint64_t count, uint64_t n, uint64_t k, feather_scale_mode *mode, unsigned *group) {
    if (count == 1) { *mode = FEATHER_SCALE_TENSOR; *group = 0; return 0; }
    if (count == n) { *mode = FEATHER_SCALE_CHANNEL; *group = 0; return 0; }
    if (count % n == 0 && k % (count / n) == 0 && (k / (count / n)) % 16 == 0) {
        *mode = FEATHER_SCALE_BLOCK;
        *group = (unsigned)(k / (count / n));
        return 0;
    }
    return -1;
}

/* ---------------------------------------------------------------- error figures */

typedef struct measure {
    /* inputs */
    const void *w;            /* original weight (N, K) */
    feather_dtype wdt;
    const float *deq;         /* dequantised weight (N, K) */
    const float *a;           /* activations (M, K) as f32 */
    uint64_t m, n, k;
    float *yref;              /* (M, N) f32 reference product */
    /* per row block: Σw², Σe², Σw·d, Σd², max|e| */
    double *blk;
} measure;

/* One row of the original weight as f32 (exact for every source dtype). */
static void row_f32(feather_dtype dt, const void *w, uint64_t off, uint64_t k, float *row) {
    if (dt == FEATHER_F32) {
        memcpy(row, (const float *)w + off, k * sizeof(float));
    } else if (dt == FEATHER_BF16) {
        const uint16_t *p = (const uint16_t *)w + off;
        for (uint64_t i = 0; i < k; i++) {
            uint32_t u = (uint32_t)p[i] << 16;
            memcpy(&row[i], &u, 4);
        }
    } else {
        for (uint64_t i = 0; i < k; i++) row[i] = feather_load_f32(dt, w, off + i);
    }
}

static void measure_rows(void *arg, size_t b0, size_t b1, int worker) {
    (void)worker;
    measure *ms = arg;
    float *row = malloc(ms->k * sizeof(float));
    if (!row) return;
    for (size_t b = b0; b < b1; b++) {
        double s_ww = 0, s_ee = 0, s_wd = 0, s_dd = 0, mx = 0;
        uint64_t r0 = b * ROW_BLOCK, r1 = r0 + ROW_BLOCK < ms->n ? r0 + ROW_BLOCK : ms->n;
        for (uint64_t nn = r0; nn < r1; nn++) {
            const float *d = ms->deq + nn * ms->k;
            row_f32(ms->wdt, ms->w, nn * ms->k, ms->k, row);
            /* Per-row sums in eight f32 lanes (products of floats are exact in double, but a
             * row's worth of f32 accumulation is well within the figures' precision), then
             * added to the block's double totals. */
            float ww[8] = {0}, ee[8] = {0}, wd[8] = {0}, dd[8] = {0}, m8[8] = {0};
            uint64_t kk = 0;
            for (; kk + 8 <= ms->k; kk += 8)
                for (int j = 0; j < 8; j++) {
                    float w = row[kk + j], q = d[kk + j], e = w - q;
                    ww[j] += w * w;
                    ee[j] += e * e;
                    wd[j] += w * q;
                    dd[j] += q * q;
                    float ae = e < 0 ? -e : e;
                    m8[j] = ae > m8[j] ? ae : m8[j];
                }
            for (; kk < ms->k; kk++) {
                float w = row[kk], q = d[kk], e = w - q, ae = e < 0 ? -e : e;
                ww[0] += w * w;
                ee[0] += e * e;
                wd[0] += w * q;
                dd[0] += q * q;
                m8[0] = ae > m8[0] ? ae : m8[0];
            }
            for (int j = 0; j < 8; j++) {
                s_ww += ww[j];
                s_ee += ee[j];
                s_wd += wd[j];
                s_dd += dd[j];
                if (m8[j] > mx) mx = m8[j];
            }
            /* fp32 product of the original weight row with every activation row; eight
             * partial sums keep the dependency chains short. */
            for (uint64_t mm = 0; mm < ms->m; mm++) {
                const float *a = ms->a + mm * ms->k;
                float acc[8] = {0};
                uint64_t k2 = 0;
                for (; k2 + 8 <= ms->k; k2 += 8)
                    for (int j = 0; j < 8; j++) acc[j] += a[k2 + j] * row[k2 + j];
                for (; k2 < ms->k; k2++) acc[0] += a[k2] * row[k2];
                ms->yref[mm * ms->n + nn] = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
            }
        }
        double *o = ms->blk + 5 * b;
        o[0] = s_ww; o[1] = s_ee; o[2] = s_wd; o[3] = s_dd; o[4] = mx;
    }
    free(row);
}

static double snr_db(double sig, double noise) {
    if (noise <= 0) return INFINITY;
    if (sig <= 0) return -INFINITY;
    return 10 * log10(sig / noise);
}

static uint64_t name_hash(const char *s) { return XXH3_64bits(s, strlen(s)); }

/* Fills M×K activations: from the activations file when it has this layer, else seeded
 * normal values rounded to fp16 (the kernel's input type). */
static feather_status activations(feather_reader *act, const char *wname, const feather_verify_options *o,
                                  uint64_t k, uint16_t **a16, float **a32, uint64_t *m, feather_error *err) {
    uint64_t rows = o->tokens ? o->tokens : 16;
    const feather_tensor *t = NULL;
    if (act) {
        char layer[600];
        snprintf(layer, sizeof layer, "%.*s", (int)(strlen(wname) - 7), wname);
        t = feather_find(act, layer);
        if (!t) t = feather_find(act, wname);
    }
    const void *src = NULL;
    if (t) {
        if (t->ndim != 2 || t->shape[1] != k ||
            (t->dtype != FEATHER_F16 && t->dtype != FEATHER_BF16 && t->dtype != FEATHER_F32))
            return feather_fail(err, FEATHER_E_INVALID, "%s: tensor '%s': activations must be F16/BF16/F32 [M, %llu]",
                                feather_reader_path(act), t->name, (unsigned long long)k);
        rows = t->shape[0];
        feather_status st = feather_tensor_data(act, t, &src, err);
        if (st) return st;
    }
    *m = rows;
    *a16 = malloc(rows * k * sizeof(uint16_t));
    *a32 = malloc(rows * k * sizeof(float));
    if (!*a16 || !*a32) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
    uint64_t s = o->seed ^ name_hash(wname);
    for (uint64_t i = 0; i < rows * k; i++) {
        float v;
        if (src) {
            v = feather_load_f32(t->dtype, src, i);
        } else {
            /* Box–Muller on a splitmix64 stream: seeded, identical on every machine. */
            uint64_t z1 = (s += 0x9e3779b97f4a7c15ull), z2 = (s += 0x9e3779b97f4a7c15ull);
            z1 = (z1 ^ (z1 >> 30)) * 0xbf58476d1ce4e5b9ull; z1 = (z1 ^ (z1 >> 27)) * 0x94d049bb133111ebull; z1 ^= z1 >> 31;
            z2 = (z2 ^ (z2 >> 30)) * 0xbf58476d1ce4e5b9ull; z2 = (z2 ^ (z2 >> 27)) * 0x94d049bb133111ebull; z2 ^= z2 >> 31;
            double u1 = ((z1 >> 11) + 1) * 0x1.0p-53, u2 = (z2 >> 11) * 0x1.0p-53;
            v = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        }
        (*a16)[i] = feather_f32_to_f16(v);
        (*a32)[i] = feather_f16_to_f32((*a16)[i]); /* both sides see the same fp16 inputs */
    }
    return FEATHER_OK;
}

typedef struct vstate {
    feather_ctx *ctx;
    const feather_verify_options *o;
    feather_device dev;
    feather_reader *act;
    feather_error *err;
} vstate;

/* Measures one converted weight against its original. */
static feather_status measure_weight(vstate *v, feather_verify_tensor *vt, const layout_info *li,
                                     const void *q, const float *scales, uint64_t nscales,
                                     const feather_tensor *ref, const void *refdata) {
    feather_error *err = v->err;
    uint64_t n = vt->n, k = vt->k, m = 0;
    feather_scale_mode mode;
    unsigned group;
    if (scale_mode_of(nscales, n, k, &mode, &group)) return FEATHER_OK; /* reported as integrity */
    feather_status st = FEATHER_OK;
    float *deq = malloc(n * k * sizeof(float)), *a32 = NULL, *yref = NULL, *yf = NULL;
    uint16_t *a16 = NULL, *y = NULL;
    uint8_t *packed = NULL;
    size_t nblk = (size_t)((n + ROW_BLOCK - 1) / ROW_BLOCK);
    double *blk = calloc(nblk * 5, sizeof(double));
    if (!deq || !blk) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto out; }
    feather_dequantize(q, li->packed, li->fmt, mode, group, scales, n, k, deq);
    if ((st = activations(v->act, vt->name, v->o, k, &a16, &a32, &m, err))) goto out;
    yref = malloc(m * n * sizeof(float));
    y = malloc(m * n * sizeof(uint16_t));
    if (!yref || !y) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto out; }
    measure ms = {.w = refdata, .wdt = ref->dtype, .deq = deq, .a = a32, .m = m, .n = n, .k = k,
                  .yref = yref, .blk = blk};
    feather_parallel_for(v->ctx, nblk, 1, measure_rows, &ms);
    double s[5] = {0};
    for (size_t b = 0; b < nblk; b++) {
        for (int j = 0; j < 4; j++) s[j] += blk[5 * b + j];
        if (blk[5 * b + 4] > s[4]) s[4] = blk[5 * b + 4];
    }
    vt->measured = 1;
    vt->weight_snr_db = snr_db(s[0], s[1]);
    vt->weight_rel_rms = s[0] > 0 ? sqrt(s[1] / s[0]) : (s[1] > 0 ? INFINITY : 0);
    vt->weight_cos = s[0] > 0 && s[3] > 0 ? s[2] / sqrt(s[0] * s[3]) : (s[0] == s[3] ? 1 : 0);
    vt->weight_max_abs = s[4];

    /* Output space: the e5m2 kernel itself. An e4m3 checkpoint has no kernel, so its product
     * is taken with the dequantised weight instead. */
    if (li->fmt == FEATHER_FP8_E5M2 && feather_gemm_supported(n, k, mode, group)) {
        const uint8_t *qp = q;
        if (!li->packed) {
            if (!(packed = malloc(n * k))) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto out; }
            feather_pack(q, n, k, packed);
            qp = packed;
        }
        feather_gemm_args ga = {.m = m, .n = n, .k = k, .a = a16, .q = qp, .scales = scales, .mode = mode,
                                .group = group, .bias = NULL, .out_bf16 = 0, .y = y};
        if ((st = feather_gemm(v->ctx, v->dev, &ga, err)))
            goto out;
        if (!(yf = malloc(m * n * sizeof(float)))) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto out; }
        for (uint64_t i = 0; i < m * n; i++) yf[i] = feather_f16_to_f32(y[i]);
    } else {
        if (!(yf = calloc(m * n, sizeof(float)))) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto out; }
        for (uint64_t mm = 0; mm < m; mm++)
            for (uint64_t nn = 0; nn < n; nn++) {
                double acc = 0;
                for (uint64_t kk = 0; kk < k; kk++) acc += (double)a32[mm * k + kk] * deq[nn * k + kk];
                yf[mm * n + nn] = (float)acc;
            }
    }
    double sig = 0, noise = 0, mx = 0;
    for (uint64_t i = 0; i < m * n; i++) {
        double e = (double)yf[i] - yref[i];
        sig += (double)yref[i] * yref[i];
        noise += e * e;
        if (!(fabs(e) <= mx)) mx = fabs(e); /* NaN propagates */
    }
    vt->output_measured = 1;
    vt->output_snr_db = snr_db(sig, noise);
    vt->output_rel_err = sig > 0 ? sqrt(noise / sig) : (noise > 0 ? INFINITY : 0);
    vt->output_max_abs = mx;
out:
    free(deq);
    free(blk);
    free(a16);
    free(a32);
    free(yref);
    free(y);
    free(yf);
    free(packed);
    return st;
}

/* ---------------------------------------------------------------- integrity */

static uint64_t bad_fp8_codes(const uint8_t *q, uint64_t n, feather_fp8 fmt) {
    uint64_t c = 0;
    if (fmt == FEATHER_FP8_E5M2)
        for (uint64_t i = 0; i < n; i++) c += (q[i] & 0x7c) == 0x7c;
    else
        for (uint64_t i = 0; i < n; i++) c += (q[i] & 0x7f) == 0x7f;
    return c;
}

static int shape_is(const feather_tensor *t, unsigned nd, uint64_t a, uint64_t b, uint64_t c) {
    if (t->ndim != nd) return 0;
    uint64_t s[3] = {a, b, c};
    for (unsigned i = 0; i < nd; i++)
        if (t->shape[i] != s[i]) return 0;
    return 1;
}

static char *xstrdup_scale_name(const char *w) {
    size_t l = strlen(w);
    char *s = malloc(l + 7);
    if (s) snprintf(s, l + 7, "%s_scale", w);
    return s;
}

/* Looks for reference shard hashes equal to this shard's recorded source hash. */
static int source_matches(feather_reader *ref, const uint64_t *ref_hashes, const char *recorded) {
    for (unsigned s = 0; s < feather_shard_count(ref); s++) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)ref_hashes[s]);
        if (recorded && !strcmp(recorded, hex)) return 1;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

feather_status feather_verify(feather_ctx *ctx, const char *path, const feather_verify_options *o,
                              feather_verify_report **out, feather_error *err) {
    double t0 = now_s();
    *out = NULL;
    feather_reader *r = NULL, *ref = NULL, *act = NULL;
    feather_status st = feather_open(&r, path, FEATHER_OPEN_NO_HASH_CHECK, err);
    if (st) return st;
    vstate v = {.ctx = ctx, .o = o, .err = err};
    feather_verify_report *rep = calloc(1, sizeof *rep);
    layout_info *li = calloc(feather_shard_count(r), sizeof *li);
    uint64_t *ref_hashes = NULL;
    if (!rep || !li) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto out; }
    snprintf(rep->path, sizeof rep->path, "%s", path);
    if (o->reference) {
        snprintf(rep->reference, sizeof rep->reference, "%s", o->reference);
        if ((st = feather_open(&ref, o->reference, FEATHER_OPEN_NO_HASH_CHECK, err))) goto out;
        if (o->activations && (st = feather_open(&act, o->activations, 0, err))) goto out;
        int fell_back = 0;
        char why[200] = "";
        if ((st = feather_device_select(o->device, &v.dev, &fell_back, why, sizeof why, err))) goto out;
        char desc[128] = "";
        if (v.dev == FEATHER_DEVICE_GPU) feather_gpu_available(desc, sizeof desc);
        snprintf(rep->device, sizeof rep->device, "%s%s%s", v.dev == FEATHER_DEVICE_GPU ? "gpu" : "cpu",
                 desc[0] ? ": " : "", desc);
        v.act = act;
    }
    rep->tensors = calloc(feather_count(r) + (ref ? feather_count(ref) : 0) + 1, sizeof *rep->tensors);
    if (!rep->tensors) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto out; }

    /* File-level problems are reported as an entry named after the file. */
    feather_verify_tensor *file_entry = &rep->tensors[rep->count];
    snprintf(file_entry->name, sizeof file_entry->name, "(file %s)", path);
    for (unsigned s = 0; s < feather_shard_count(r); s++) {
        char why[300];
        if (parse_layout(r, s, &li[s], why, sizeof why))
            problem(file_entry, "%s: %s", feather_shard_path(r, s), why);
    }
    if (ref) {
        if (!(ref_hashes = calloc(feather_shard_count(ref), sizeof *ref_hashes))) {
            st = feather_fail(err, FEATHER_E_NOMEM, "out of memory");
            goto out;
        }
        for (unsigned s = 0; s < feather_shard_count(ref); s++)
            if ((st = feather_shard_xxh3(ref, s, &ref_hashes[s], err))) goto out;
        for (unsigned s = 0; s < feather_shard_count(r); s++) {
            const char *rec = feather_metadata_get(r, s, "feather.source_xxh3");
            if (!source_matches(ref, ref_hashes, rec))
                problem(file_entry, "the reference %s does not match: %s was converted from a file with XXH3 %s",
                        o->reference, feather_shard_path(r, s), rec ? rec : "(none recorded)");
        }
    }
    if (file_entry->problem[0]) rep->count++;

    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < feather_count(r); i++) total += feather_tensor_at(r, i)->nbytes;
    for (size_t i = 0; i < feather_count(r); i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        const layout_info *L = &li[t->shard];
        if (feather_cancelled()) { st = feather_fail(err, FEATHER_E_CANCELLED, "interrupted"); goto out; }
        /* Scales and ComfyUI layer tags belong to their weight's entry. */
        if (L->tensors && (feather_ends_with(t->name, ".weight_scale") || feather_ends_with(t->name, ".comfy_quant"))) {
            char w[600];
            size_t cut = feather_ends_with(t->name, ".weight_scale") ? 6 : 12;
            snprintf(w, sizeof w, "%.*s%s", (int)(strlen(t->name) - cut), t->name, cut == 6 ? "" : ".weight");
            if (cJSON_GetObjectItemCaseSensitive(L->tensors, w)) {
                const void *d;
                uint64_t rec;
                if (!feather_tensor_data(r, t, &d, err) && feather_recorded_hash(r, t, &rec) && rec != feather_hash(d, t->nbytes)) {
                    feather_verify_tensor *vt = &rep->tensors[rep->count++];
                    snprintf(vt->name, sizeof vt->name, "%s", t->name);
                    problem(vt, "XXH3 mismatch: the bytes changed since the file was written");
                }
                continue;
            }
        }
        feather_verify_tensor *vt = &rep->tensors[rep->count++];
        snprintf(vt->name, sizeof vt->name, "%s", t->name);
        snprintf(vt->dtype, sizeof vt->dtype, "%s", feather_dtype_name(t->dtype));
        vt->bytes = t->nbytes;
        const void *d;
        if ((st = feather_tensor_data(r, t, &d, err))) goto out;
        uint64_t rec;
        if (feather_recorded_hash(r, t, &rec)) {
            uint64_t h = feather_hash(d, t->nbytes);
            if (h != rec)
                problem(vt, "XXH3 mismatch (recorded %016llx, computed %016llx): the bytes changed since the file was written",
                        (unsigned long long)rec, (unsigned long long)h);
        } else if (L->tensors) {
            problem(vt, "no XXH3 recorded for this tensor");
        }
        uint64_t n = 0, k = 0;
        const void *sd = NULL;
        float *scales = NULL;
        uint64_t nscales = 0;
        int conv = L->tensors && recorded_shape(L, t->name, &n, &k);
        if (conv) {
            vt->converted = 1;
            vt->n = n;
            vt->k = k;
            if (t->dtype != feather_fp8_dtype(L->fmt))
                problem(vt, "dtype %s, but feather.fp8 says %s", feather_dtype_name(t->dtype), feather_fp8_name(L->fmt));
            else if (L->packed ? !shape_is(t, 3, k / 16, n, 16) || k % 16 : !shape_is(t, 2, n, k, 0))
                problem(vt, "shape does not match the recorded original [%llu, %llu] in the %s layout",
                        (unsigned long long)n, (unsigned long long)k, L->packed ? "packed" : "comfy");
            uint64_t bad = vt->problem[0] ? 0 : bad_fp8_codes(d, t->nbytes, L->fmt);
            if (bad) problem(vt, "%llu Inf/NaN fp8 codes", (unsigned long long)bad);
            char *sname = xstrdup_scale_name(t->name);
            const feather_tensor *s = sname ? feather_find(r, sname) : NULL;
            free(sname);
            feather_scale_mode mode;
            unsigned group;
            if (!s) problem(vt, "scale tensor '%s_scale' is missing", t->name);
            else if (s->dtype != FEATHER_F32) problem(vt, "scale tensor is %s, not F32", feather_dtype_name(s->dtype));
            else if (scale_mode_of(s->nelem, n, k, &mode, &group))
                problem(vt, "%llu scales fit no scale mode of a [%llu, %llu] weight", (unsigned long long)s->nelem,
                        (unsigned long long)n, (unsigned long long)k);
            else if (!feather_tensor_data(r, s, &sd, err)) {
                vt->bytes += s->nbytes;
                nscales = s->nelem;
                scales = malloc(nscales * sizeof(float));
                if (!scales) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto out; }
                memcpy(scales, sd, nscales * sizeof(float));
                for (uint64_t j = 0; j < nscales; j++)
                    if (!isfinite(scales[j]) || !(scales[j] > 0)) {
                        problem(vt, "scale %llu is %g (must be finite and > 0)", (unsigned long long)j, scales[j]);
                        break;
                    }
            }
        }
        if (ref) {
            const feather_tensor *rt = feather_find(ref, t->name);
            const void *rd = NULL;
            if (!rt) {
                problem(vt, "not in the reference %s", o->reference);
            } else if ((st = feather_tensor_data(ref, rt, &rd, err))) {
                free(scales);
                goto out;
            } else {
                vt->bytes_reference = rt->nbytes;
                if (!conv) {
                    if (rt->dtype != t->dtype || rt->nbytes != t->nbytes || memcmp(rd, d, t->nbytes))
                        problem(vt, "kept tensor differs from the reference");
                } else if (rt->ndim != 2 || rt->shape[0] != n || rt->shape[1] != k ||
                           (rt->dtype != FEATHER_F16 && rt->dtype != FEATHER_BF16 && rt->dtype != FEATHER_F32)) {
                    problem(vt, "the reference tensor is %s with another shape than the recorded [%llu, %llu]",
                            feather_dtype_name(rt->dtype), (unsigned long long)n, (unsigned long long)k);
                } else if (!vt->problem[0] && scales) {
                    if ((st = measure_weight(&v, vt, L, d, scales, nscales, rt, rd))) {
                        free(scales);
                        goto out;
                    }
                }
                feather_tensor_release(ref, rt);
            }
        }
        free(scales);
        feather_tensor_release(r, t);
        done += t->nbytes;
        if (o->progress) o->progress(o->progress_arg, done, total, t->name);
    }
    if (ref) /* tensors of the original that did not make it into the conversion */
        for (size_t i = 0; i < feather_count(ref); i++) {
            const feather_tensor *rt = feather_tensor_at(ref, i);
            if (feather_find(r, rt->name)) continue;
            feather_verify_tensor *vt = &rep->tensors[rep->count++];
            snprintf(vt->name, sizeof vt->name, "%s", rt->name);
            snprintf(vt->dtype, sizeof vt->dtype, "%s", feather_dtype_name(rt->dtype));
            vt->bytes_reference = rt->nbytes;
            problem(vt, "in the reference but missing from the converted file");
        }

    /* Verdicts and summary. */
    double *snr = calloc(rep->count + 1, sizeof(double));
    if (!snr) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto out; }
    for (size_t i = 0; i < rep->count; i++) {
        feather_verify_tensor *vt = &rep->tensors[i];
        rep->bytes_converted += vt->bytes;
        rep->bytes_reference += vt->bytes_reference;
        if (vt->problem[0]) rep->problems++;
        if (!vt->measured) continue;
        double s = vt->output_measured ? vt->output_snr_db : vt->weight_snr_db;
        double re = vt->output_measured ? vt->output_rel_err : vt->weight_rel_rms;
        snr[rep->measured++] = s;
        if ((!isnan(o->min_snr_db) && !(s >= o->min_snr_db)) || (!isnan(o->max_rel_err) && !(re <= o->max_rel_err))) {
            vt->failed_threshold = 1;
            rep->threshold_failures++;
        }
    }
    if (rep->measured) {
        qsort(snr, rep->measured, sizeof(double), cmp_double);
        double sum = 0;
        size_t finite = 0;
        for (size_t i = 0; i < rep->measured; i++)
            if (isfinite(snr[i])) { sum += snr[i]; finite++; }
        rep->snr_mean_db = finite ? sum / (double)finite : INFINITY;
        rep->snr_median_db = rep->measured % 2 ? snr[rep->measured / 2]
                                               : 0.5 * (snr[rep->measured / 2 - 1] + snr[rep->measured / 2]);
        rep->snr_worst_db = snr[0];
    }
    free(snr);
    rep->seconds = now_s() - t0;
    if (rep->problems || rep->threshold_failures)
        st = feather_fail(err, FEATHER_E_MISMATCH, "%s: %zu tensor(s) with problems, %zu under the thresholds", path,
                          rep->problems, rep->threshold_failures);
out:
    for (unsigned s = 0; li && s < feather_shard_count(r); s++) cJSON_Delete(li[s].tensors);
    free(li);
    free(ref_hashes);
    feather_close(act);
    feather_close(ref);
    feather_close(r);
    if (rep && (st == FEATHER_OK || st == FEATHER_E_MISMATCH)) *out = rep;
    else feather_verify_report_free(rep);
    return st;
}

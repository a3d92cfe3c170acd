/* Verification: integrity of a converted checkpoint, and its error against the original.
 *
 * Integrity needs no reference: header, metadata consistent with the tensors, every tensor's
 * recorded XXH3, no Inf/NaN fp8 codes, finite positive scales. With the original, each
 * converted weight is measured in weight space (dequantised vs original) and in output space:
 * the checkpoint's own matmul (feather_gemm: fp16 activations × e5m2 weight, fp32 sums) against
 * an fp32 product with the original weight. Kept tensors must equal the original's bytes.
 *
 * The files are streamed once, tensor by tensor in the converted file's order: each tensor's
 * checks run as one pass over the context's threads (hashes, fp8 codes, and for a measured
 * weight the fused row work of verify_rows.h) while the next tensor is read ahead. The figures
 * follow the fixed reduction order of verify_rows.h, so a report does not depend on the number
 * of threads or the SIMD level. */
#include "internal.h"
#include "verify_rows.h"
#include "feather/convert.h"
#include "feather/verify.h"

#include <cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

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

/* A problem into dst (a tensor's, the file's, or one noted for later), unless one is there:
 * the first problem found is the one reported. */
static void note(char *dst, size_t len, const char *fmt, ...) FEATHER_PRINTF(3, 4);
static void note(char *dst, size_t len, const char *fmt, ...) {
    if (dst[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, len, fmt, ap);
    va_end(ap);
}
#define problem(t, ...) note((t)->problem, sizeof (t)->problem, __VA_ARGS__)
#define file_problem(rep, ...) note((rep)->file_problem, sizeof (rep)->file_problem, __VA_ARGS__)

/* ---------------------------------------------------------------- the file's description */

typedef struct layout_info {
    int packed;
    feather_fp8 fmt;
    cJSON *tensors; /* feather.tensors */
    feather_json_index tix; /* its entries by name */
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
    if (feather_json_index_init(&li->tix, li->tensors)) {
        snprintf(why, len, "out of memory for feather.tensors");
        return -1;
    }
    return 0;
}

/* The recorded original shape of a converted weight: 0 when it is not listed. */
static int recorded_shape(const layout_info *li, const char *name, uint64_t *n, uint64_t *k) {
    const cJSON *e = feather_json_index_get(&li->tix, name);
    const cJSON *sh = e ? cJSON_GetObjectItemCaseSensitive(e, "shape") : NULL;
    if (!cJSON_IsArray(sh) || cJSON_GetArraySize(sh) != 2) return 0;
    double a = cJSON_GetArrayItem(sh, 0)->valuedouble, b = cJSON_GetArrayItem(sh, 1)->valuedouble;
    if (!(a >= 1 && b >= 1 && a < 9e15 && b < 9e15)) return 0;
    *n = (uint64_t)a;
    *k = (uint64_t)b;
    return 1;
}

/* ---------------------------------------------------------------- activations */

static uint64_t name_hash(const char *s) { return XXH3_64bits(s, strlen(s)); }

typedef struct act_job {
    const feather_tensor *t; /* from the activations file, or NULL */
    const void *src;
    uint64_t seed, k, m;
    uint16_t *a16;           /* (M, K) */
    float *a32;              /* verify_rows.h's layout, zeros past K */
} act_job;

static void act_rows(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    const act_job *j = arg;
    for (uint64_t row = b; row < e; row++) {
        for (uint64_t c = 0; c < j->k; c++) {
            const uint64_t i = row * j->k + c;
            float v;
            if (j->src) {
                v = feather_load_f32(j->t->dtype, j->src, i);
            } else {
                /* Box–Muller on a splitmix64 stream: seeded, identical on every machine. Element
                 * i takes the stream's draws 2i + 1 and 2i + 2, so rows can be filled apart. */
                uint64_t z1 = j->seed + (2 * i + 1) * 0x9e3779b97f4a7c15ull, z2 = z1 + 0x9e3779b97f4a7c15ull;
                z1 = (z1 ^ (z1 >> 30)) * 0xbf58476d1ce4e5b9ull; z1 = (z1 ^ (z1 >> 27)) * 0x94d049bb133111ebull; z1 ^= z1 >> 31;
                z2 = (z2 ^ (z2 >> 30)) * 0xbf58476d1ce4e5b9ull; z2 = (z2 ^ (z2 >> 27)) * 0x94d049bb133111ebull; z2 ^= z2 >> 31;
                double u1 = ((z1 >> 11) + 1) * 0x1.0p-53, u2 = (z2 >> 11) * 0x1.0p-53;
                v = (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
            }
            j->a16[i] = feather_f32_to_f16(v);
            j->a32[vrows_a_index(j->m, row, c)] = feather_f16_to_f32(j->a16[i]); /* both sides see the same fp16 inputs */
        }
        for (uint64_t c = j->k; c % VROWS_KC; c++) j->a32[vrows_a_index(j->m, row, c)] = 0.0f;
    }
}

/* Fills M×K activations: from the activations file when it has this layer, else seeded
 * normal values rounded to fp16 (the kernel's input type); a32 holds them as f32 in
 * verify_rows.h's layout. */
static feather_status activations(feather_ctx *ctx, feather_reader *act, const char *wname,
                                  const feather_verify_options *o, uint64_t k, uint16_t **a16, float **a32,
                                  uint64_t *m, feather_error *err) {
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
        if (t->ndim != 2 || t->shape[1] != k || !feather_is_float(t->dtype))
            return feather_fail(err, FEATHER_E_INVALID, "%s: tensor '%s': activations must be F16/BF16/F32 [M, %llu]",
                                feather_reader_path(act), t->name, (unsigned long long)k);
        rows = t->shape[0];
        feather_status st = feather_tensor_data(act, t, &src, err);
        if (st) return st;
    }
    *m = rows;
    *a16 = malloc(rows * k * sizeof(uint16_t));
    *a32 = malloc(vrows_a_size(rows, k) * sizeof(float));
    if (!*a16 || !*a32) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
    act_job j = {.t = t, .src = src, .seed = o->seed ^ name_hash(wname), .k = k, .m = rows, .a16 = *a16, .a32 = *a32};
    /* rows of 4096 values or more a chunk: the threads are woken only where that pays */
    feather_parallel_for(ctx, rows, (size_t)((4096 + k - 1) / k), act_rows, &j);
    return FEATHER_OK;
}

/* ---------------------------------------------------------------- one tensor's work */

/* Everything read from one tensor is done in one pass over the context's threads, as tasks
 * taken in order: the reference file's stream hash (task 0: the matching original tensor, when
 * it is the next one of its shard), this tensor's recorded-hash check (task 1), then the units:
 * row blocks of a measured weight (verify_rows.h), or byte chunks (fp8 code check of a weight
 * that is not measured, comparison of a kept tensor with the original). The hashes are serial
 * streams; handing them out first lets them run beside the units on the other threads, while the
 * data is in memory. */
#define CHUNK_BYTES ((uint64_t)1 << 20)

enum { UNITS_NONE, UNITS_CODES, UNITS_COMPARE, UNITS_ROWS };

typedef struct tensor_job {
    const vrows_kernels *kern;
    feather_reader *ref;
    feather_shard_hasher *refh; /* NULL: no reference-stream task */
    const void *rdata;
    uint64_t rbytes;
    const void *data;           /* this tensor */
    uint64_t nbytes;
    int hash;                   /* check this tensor's recorded hash */
    uint64_t hash_value;
    int units;
    uint64_t nunits;
    feather_fp8 fmt;            /* UNITS_CODES */
    const void *other;          /* UNITS_COMPARE: the original's bytes */
    const vrows_weight *vw;     /* UNITS_ROWS */
    float *scratch;
    size_t scratch_floats;
    atomic_size_t next;
    atomic_uint_fast64_t bad;
    atomic_int differs;
} tensor_job;

static void job_task(tensor_job *j, size_t i, int worker) {
    if (i == 0) {
        if (j->refh) feather_shard_hasher_feed(j->refh, j->ref, j->rdata, j->rbytes);
        return;
    }
    if (i == 1) {
        if (j->hash) j->hash_value = feather_hash(j->data, j->nbytes);
        return;
    }
    const uint64_t u = i - 2;
    if (j->units == UNITS_ROWS) {
        uint64_t bad = feather_vrows_block(j->kern, j->vw, u, j->scratch + (size_t)worker * j->scratch_floats);
        if (bad) atomic_fetch_add(&j->bad, bad);
        return;
    }
    const uint64_t b = u * CHUNK_BYTES, len = j->nbytes - b < CHUNK_BYTES ? j->nbytes - b : CHUNK_BYTES;
    if (j->units == UNITS_CODES) {
        uint64_t bad = j->kern->bad_codes((const uint8_t *)j->data + b, len, j->fmt);
        if (bad) atomic_fetch_add(&j->bad, bad);
    } else if (memcmp((const uint8_t *)j->data + b, (const uint8_t *)j->other + b, len)) {
        atomic_store(&j->differs, 1);
    }
}

static void job_worker(void *arg, size_t b, size_t e, int worker) {
    (void)b;
    (void)e;
    tensor_job *j = arg;
    for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < 2 + j->nunits;) job_task(j, i, worker);
}

/* Runs the job on every thread of ctx, or on this one where it is small (under SMALL_JOB bytes
 * and one unit of work: waking the workers for it cost more than the work, 20 µs a tensor in a
 * file of 93 696 tiny ones); the scratch of a row job is allocated here. */
#define SMALL_JOB ((uint64_t)1 << 18)
static feather_status run_job(feather_ctx *ctx, tensor_job *j, feather_error *err) {
    const int small = j->nbytes + (j->refh ? j->rbytes : 0) < SMALL_JOB &&
                      (j->units == UNITS_ROWS ? j->vw->n <= VROWS_RB : j->nbytes <= CHUNK_BYTES);
    const int workers = small ? 1 : feather_ctx_threads(ctx);
    if (j->units == UNITS_ROWS) {
        j->scratch_floats = (feather_vrows_scratch(j->vw) + 15) & ~(size_t)15;
        j->scratch = aligned_alloc(64, (size_t)workers * j->scratch_floats * sizeof(float));
        if (!j->scratch) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
        j->nunits = (j->vw->n + VROWS_RB - 1) / VROWS_RB;
    } else if (j->units != UNITS_NONE) {
        j->nunits = (j->nbytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
    }
    atomic_init(&j->next, 0);
    atomic_init(&j->bad, 0);
    atomic_init(&j->differs, 0);
    feather_parallel_for(ctx, (size_t)workers, 1, job_worker, j);
    free(j->scratch);
    j->scratch = NULL;
    return FEATHER_OK;
}

/* ---------------------------------------------------------------- error figures */

static double snr_db(double sig, double noise) {
    if (noise <= 0) return INFINITY;
    if (sig <= 0) return -INFINITY;
    return 10 * log10(sig / noise);
}

/* Weight space, from the per-row sums (added in row order). */
static void weight_figures(feather_verify_tensor *vt, const double *rowsums, uint64_t n) {
    double s[VS_COUNT] = {0};
    for (uint64_t i = 0; i < n; i++) {
        const double *r = rowsums + i * VS_COUNT;
        for (int c = 0; c < VS_MAX; c++) s[c] += r[c];
        if (r[VS_MAX] > s[VS_MAX]) s[VS_MAX] = r[VS_MAX];
    }
    vt->measured = 1;
    vt->weight_snr_db = snr_db(s[VS_WW], s[VS_EE]);
    vt->weight_rel_rms = s[VS_WW] > 0 ? sqrt(s[VS_EE] / s[VS_WW]) : (s[VS_EE] > 0 ? INFINITY : 0);
    vt->weight_cos = s[VS_WW] > 0 && s[VS_DD] > 0 ? s[VS_WD] / sqrt(s[VS_WW] * s[VS_DD])
                                                   : (s[VS_WW] == s[VS_DD] ? 1 : 0);
    vt->weight_max_abs = s[VS_MAX];
    vt->nonfinite = (uint64_t)s[VS_NF];
}

/* Output space: the checkpoint's product y against the reference, in double, in order. */
static void output_figures(feather_verify_tensor *vt, const float *y, const float *yref, uint64_t count) {
    double sig = 0, noise = 0, mx = 0;
    for (uint64_t i = 0; i < count; i++) {
        double e = (double)y[i] - yref[i];
        sig += (double)yref[i] * yref[i];
        noise += e * e;
        if (!(fabs(e) <= mx)) mx = fabs(e); /* NaN propagates */
    }
    vt->output_measured = 1;
    vt->output_snr_db = snr_db(sig, noise);
    vt->output_rel_err = sig > 0 ? sqrt(noise / sig) : (noise > 0 ? INFINITY : 0);
    vt->output_max_abs = mx;
}

/* The fp8 product on a GPU runs on a thread of its own, beside the CPU threads' row work. */
typedef struct kernel_call {
    feather_ctx *ctx;
    feather_device dev;
    feather_gemm_args ga;
    feather_status st;
    feather_error err;
    pthread_t thread;
    int started;
} kernel_call;

static void *kernel_main(void *p) {
    kernel_call *kc = p;
    kc->st = feather_gemm(kc->ctx, kc->dev, &kc->ga, &kc->err);
    return NULL;
}

typedef struct vstate {
    feather_ctx *ctx;
    const feather_verify_options *o;
    feather_device dev;
    feather_reader *act;
    feather_error *err;
    vrows_kernels kern;
    float *deq;   /* an fp8 reference weight dequantised, kept for the next one: its pages are */
    size_t deq_cap; /* faulted in once, not for every weight */
} vstate;

/* Measuring one converted weight against its original: weight_begin, the tensor's job (its row
 * blocks), then weight_end when no problem turned up; weight_run_free in every case. */
typedef struct weight_run {
    uint16_t *a16, *y;
    float *a32, *yref, *ydeq, *yf;
    double *rowsums;
    uint8_t *packed;
    vrows_weight vw;
    kernel_call kc;
    int kernel; /* the fp8 product goes through feather_gemm */
} weight_run;

static void weight_run_free(weight_run *w) {
    if (w->kc.started) pthread_join(w->kc.thread, NULL);
    w->kc.started = 0;
    free(w->a16);
    free(w->a32);
    free(w->yref);
    free(w->ydeq);
    free(w->y);
    free(w->yf);
    free(w->rowsums);
    free(w->packed);
}

/* Prepares the measurement of a weight (activations, outputs, the GPU product started) and
 * points the job at its rows. */
static feather_status weight_begin(vstate *v, weight_run *w, tensor_job *j, const char *name, const layout_info *li,
                                   const void *q, const float *scales, feather_scale_mode mode, unsigned group,
                                   uint64_t n, uint64_t k, feather_dtype refdt, const void *refdata) {
    feather_error *err = v->err;
    uint64_t m = 0;
    feather_status st = activations(v->ctx, v->act, name, v->o, k, &w->a16, &w->a32, &m, err);
    if (st) return st;
    /* An e4m3 checkpoint has no kernel: its product is taken with the dequantised weight, in
     * the rows pass. */
    w->kernel = li->fmt == FEATHER_FP8_E5M2 && feather_gemm_supported(n, k, mode, group);
    w->yref = malloc(m * n * sizeof(float));
    w->rowsums = malloc(n * VS_COUNT * sizeof(double));
    w->yf = malloc(m * n * sizeof(float));
    if (w->kernel) w->y = malloc(m * n * sizeof(uint16_t));
    else w->ydeq = malloc(m * n * sizeof(float));
    if (!w->yref || !w->rowsums || !w->yf || (w->kernel ? !w->y : !w->ydeq))
        return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
    w->vw = (vrows_weight){.w = refdata, .wdt = refdt, .q = q, .packed = li->packed, .fmt = li->fmt,
                           .scales = scales, .mode = mode, .group = group, .n = n, .k = k, .a = w->a32,
                           .m = m, .yref = w->yref, .ydeq = w->ydeq, .rowsums = w->rowsums};
    j->units = UNITS_ROWS;
    j->vw = &w->vw;
    if (w->kernel) {
        const uint8_t *qp = q;
        if (!li->packed) {
            if (!(w->packed = malloc(n * k))) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
            feather_pack(q, n, k, w->packed);
            qp = w->packed;
        }
        w->kc = (kernel_call){.ctx = v->ctx, .dev = v->dev,
                              .ga = {.m = m, .n = n, .k = k, .a = w->a16, .q = qp, .scales = scales, .mode = mode,
                                     .group = group, .bias = NULL, .out_bf16 = 0, .y = w->y}};
        /* a small weight's product is called after the job instead, on this thread: a thread
         * started and joined per tensor cost more than the overlap gained */
        if (v->dev == FEATHER_DEVICE_GPU && n * k >= SMALL_JOB && !pthread_create(&w->kc.thread, NULL, kernel_main, &w->kc))
            w->kc.started = 1;
    }
    return FEATHER_OK;
}

/* After the job: the kernel's product (on the CPU now, or the GPU thread's) and the figures. */
static feather_status weight_end(vstate *v, weight_run *w, feather_verify_tensor *vt) {
    const uint64_t mn = w->vw.m * w->vw.n;
    if (w->kernel) {
        if (w->kc.started) {
            pthread_join(w->kc.thread, NULL);
            w->kc.started = 0;
        } else {
            w->kc.st = feather_gemm(v->ctx, v->dev, &w->kc.ga, &w->kc.err);
        }
        if (w->kc.st) {
            *v->err = w->kc.err;
            return w->kc.st;
        }
        for (uint64_t i = 0; i < mn; i++) w->yf[i] = feather_f16_to_f32(w->y[i]);
    } else {
        memcpy(w->yf, w->ydeq, mn * sizeof(float));
    }
    weight_figures(vt, w->rowsums, w->vw.n);
    output_figures(vt, w->yf, w->yref, mn);
    return FEATHER_OK;
}

/* ---------------------------------------------------------------- integrity */

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

/* Rows of an fp8 or FP4 reference weight, dequantised on the context's threads. */
typedef struct deq_rows_job {
    feather_simd simd;
    const uint8_t *q;
    feather_dtype dtype;
    int packed;
    const feather_scale_layout *L;
    unsigned fp4;
    const float *sc;
    float g;
    uint64_t n, k;
    float *out;
} deq_rows_job;

static void deq_rows_fn(void *arg, size_t r0, size_t r1, int worker) {
    (void)worker;
    const deq_rows_job *j = arg;
    feather_dequantize_weight(j->simd, j->q, j->dtype, j->packed, j->L, j->fp4, j->sc, j->g, j->n, j->k, r0, r1,
                              j->out + r0 * j->k);
}

/* An fp8 reference weight of [N, K] (plain, or packed as a feather file stores it), or an FP4
 * one (f4 as feather_fp4_of found it; its group 0 for fp8), dequantised with its own scales into
 * v->deq: what a file converted from such a checkpoint is measured against. NULL with why filled
 * when it cannot be (its shape or scales fit nothing), or out of memory. */
static float *fp8_reference(vstate *v, feather_reader *ref, const feather_tensor *rt, const feather_fp4 *f4,
                            const void *rd, uint64_t n, uint64_t k, char *why, size_t wl) {
    const unsigned fp4 = f4->group;
    const int packed = !fp4 && shape_is(rt, 3, k / 16, n, 16) && k % 16 == 0;
    if (!packed && !shape_is(rt, 2, n, fp4 ? k / 2 : k, 0)) {
        snprintf(why, wl, "the reference tensor's shape is not the recorded [%llu, %llu]", (unsigned long long)n,
                 (unsigned long long)k);
        return NULL;
    }
    const feather_tensor *s = fp4 ? f4->scale : feather_fp8_scale_of(ref, rt->name), *s2 = f4->scale2;
    const void *sd = NULL, *d2 = NULL;
    feather_scale_layout L;
    feather_error e2;
    const int fit = feather_quant_scales_of(ref, rt, s, s2, fp4, n, k, &L);
    if (fit || (s && feather_tensor_data(ref, s, &sd, &e2)) || (s2 && feather_tensor_data(ref, s2, &d2, &e2))) {
        char ss[64];
        snprintf(why, wl, "the reference's scales (%s, %s %s) %s", s->name, feather_dtype_name(s->dtype),
                 feather_shape_str(s, ss, sizeof ss),
                 fit == -2 ? "are of a dtype feather does not read" : fit ? "fit no scale layout of its weight"
                                                                      : "cannot be read");
        return NULL;
    }
    const uint64_t ns = s ? s->nelem : 1;
    float g = 1;
    float *sc = malloc(L.count * sizeof(float));
    if (v->deq_cap < n * k) {
        free(v->deq);
        v->deq_cap = (v->deq = malloc(n * k * sizeof(float))) ? n * k : 0;
    }
    float *out = v->deq;
    const uint64_t bad = sc ? feather_scales_load(s, sd, &L, k, sc) : 0;
    if (!sc || !out) {
        snprintf(why, wl, "out of memory");
    } else if (bad < ns) {
        snprintf(why, wl, "the reference's scale %llu (%s) is %g: it dequantises no weight", (unsigned long long)bad,
                 s->name, feather_scale_at(s, sd, &L, bad));
    } else if (fp4 && feather_fp4_tensor_scale(rt, s2, d2, sc, L.count, &g)) {
        snprintf(why, wl, "the reference's tensor scale (%s) is %g: it dequantises no weight", s2->name, g);
    } else {
        deq_rows_job j = {.simd = feather_ctx_simd(v->ctx), .q = rd, .dtype = rt->dtype, .packed = packed, .L = &L,
                          .fp4 = fp4, .sc = sc, .g = g, .n = n, .k = k, .out = out};
        feather_parallel_for(v->ctx, n, 16, deq_rows_fn, &j);
        free(sc);
        return out;
    }
    free(sc);
    return NULL;
}

/* Whether a tensor of an fp8 reference that the conversion leaves out belongs to an fp8 weight
 * of the converted file (its scales, activation scale or ComfyUI tag; compressed-tensors' codes
 * X.weight_packed, written as X.weight) or is a legacy scaled_fp8 marker. */
static int fp8_companion(feather_reader *r, const feather_tensor *rt) {
    static const char *const tails[] = {".weight_scale",  ".weight_scale_inv",    ".weight_scale_2",
                                        ".scale_weight",  ".input_scale",         ".scale_input",
                                        ".comfy_quant",   ".weight_global_scale", ".input_global_scale",
                                        ".weight_packed"};
    if (feather_is_scaled_fp8_marker(rt)) return 1;
    for (size_t i = 0; i < sizeof tails / sizeof tails[0]; i++)
        if (feather_ends_with(rt->name, tails[i])) {
            char w[4200];
            snprintf(w, sizeof w, "%.*s.weight", (int)(strlen(rt->name) - strlen(tails[i])), rt->name);
            return feather_find(r, w) != NULL;
        }
    return 0;
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

/* Ascending, NaN first (the worst: an error that could not be measured). */
static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    if (isnan(x) || isnan(y)) return !isnan(x) - !isnan(y);
    return x < y ? -1 : x > y;
}

feather_status feather_verify(feather_ctx *ctx, const char *path, const feather_verify_options *o,
                              feather_verify_report **out, feather_error *err) {
    double t0 = feather_now_s();
    *out = NULL;
    feather_reader *r = NULL, *ref = NULL, *act = NULL;
    feather_status st = feather_open(&r, path, FEATHER_OPEN_NO_HASH_CHECK, err);
    if (st) return st;
    vstate v = {.ctx = ctx, .o = o, .err = err};
    feather_vrows_kernels(feather_ctx_simd(ctx), &v.kern);
    feather_verify_report *rep = calloc(1, sizeof *rep);
    layout_info *li = calloc(feather_shard_count(r), sizeof *li);
    uint64_t *ref_hashes = NULL;
    feather_shard_hasher *hashers = NULL;
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
    rep->tensors = calloc(feather_count(r) + (ref ? feather_count(ref) : 0) + 1, sizeof *rep->tensors); /* never 0 */
    if (!rep->tensors) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto out; }

    for (unsigned s = 0; s < feather_shard_count(r); s++) {
        char why[300];
        if (parse_layout(r, s, &li[s], why, sizeof why))
            file_problem(rep, "%s: %s", feather_shard_path(r, s), why);
    }
    /* The reference's shard hashes are taken along the way, as the original tensors come up. */
    if (ref) {
        ref_hashes = calloc(feather_shard_count(ref), sizeof *ref_hashes);
        hashers = calloc(feather_shard_count(ref), sizeof *hashers);
        if (!ref_hashes || !hashers) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto out; }
        for (unsigned s = 0; s < feather_shard_count(ref); s++)
            if ((st = feather_shard_hasher_begin(&hashers[s], ref, s, err))) goto out;
    }

    uint64_t total = 0, done = 0;
    for (size_t i = 0; i < feather_count(r); i++) total += feather_tensor_at(r, i)->nbytes;
    for (size_t i = 0; i < feather_count(r); i++) {
        const feather_tensor *t = feather_tensor_at(r, i);
        const layout_info *L = &li[t->shard];
        if (feather_cancelled()) { st = feather_fail(err, FEATHER_E_CANCELLED, "interrupted"); goto out; }
        /* The next tensor (and its original) are read from disk while this one is worked on. */
        if (i + 1 < feather_count(r)) {
            const feather_tensor *nt = feather_tensor_at(r, i + 1), *nrt = ref ? feather_find(ref, nt->name) : NULL;
            feather_tensor_prefetch(r, nt);
            if (nrt) feather_tensor_prefetch(ref, nrt);
        }
        /* Scales and ComfyUI layer tags belong to their weight's entry. */
        if (L->tensors && (feather_ends_with(t->name, ".weight_scale") || feather_ends_with(t->name, ".comfy_quant"))) {
            char w[600];
            size_t cut = feather_ends_with(t->name, ".weight_scale") ? 6 : 12;
            snprintf(w, sizeof w, "%.*s%s", (int)(strlen(t->name) - cut), t->name, cut == 6 ? "" : ".weight");
            if (feather_json_index_get(&L->tix, w)) {
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
        tensor_job job = {.kern = &v.kern, .ref = ref, .data = d, .nbytes = t->nbytes};
        uint64_t rec = 0;
        job.hash = feather_recorded_hash(r, t, &rec);

        /* What the tensor's metadata and the original allow; problems are noted, then reported
         * after the pass in the order: hash, layout, fp8 codes, scales, reference. */
        char p_layout[300] = "", p_scale[300] = "", p_ref[300] = "";
        uint64_t n = 0, k = 0;
        float *scales = NULL;
        feather_scale_mode mode = FEATHER_SCALE_NONE;
        unsigned group = 0;
        int conv = L->tensors && recorded_shape(L, t->name, &n, &k), layout_ok = 0, scales_ok = 0;
        if (conv) {
            vt->converted = 1;
            vt->n = n;
            vt->k = k;
            if (t->dtype != feather_fp8_dtype(L->fmt))
                note(p_layout, sizeof p_layout, "dtype %s, but feather.fp8 says %s", feather_dtype_name(t->dtype),
                     feather_fp8_name(L->fmt));
            else if (L->packed ? !shape_is(t, 3, k / 16, n, 16) || k % 16 : !shape_is(t, 2, n, k, 0))
                note(p_layout, sizeof p_layout, "shape does not match the recorded original [%llu, %llu] in the %s layout",
                     (unsigned long long)n, (unsigned long long)k, L->packed ? "packed" : "comfy");
            else
                layout_ok = 1;
            char *sname = xstrdup_scale_name(t->name);
            const feather_tensor *s = sname ? feather_find(r, sname) : NULL;
            free(sname);
            const void *sd = NULL;
            feather_scale_layout sl;
            char ss[64];
            if (!s) note(p_scale, sizeof p_scale, "scale tensor '%s_scale' is missing", t->name);
            else if (s->dtype != FEATHER_F32) note(p_scale, sizeof p_scale, "scale tensor is %s, not F32", feather_dtype_name(s->dtype));
            else if (feather_scale_layout_of(s, n, k, &sl) || sl.rows) /* feather's scales follow rows */
                note(p_scale, sizeof p_scale, "scales %s fit no scale mode of a [%llu, %llu] weight",
                     feather_shape_str(s, ss, sizeof ss), (unsigned long long)n, (unsigned long long)k);
            else if (!feather_tensor_data(r, s, &sd, err)) {
                vt->bytes += s->nbytes;
                mode = sl.mode;
                group = sl.group;
                scales = malloc(s->nelem * sizeof(float));
                if (!scales) { st = feather_fail(err, FEATHER_E_NOMEM, "out of memory"); goto out; }
                const uint64_t bad = feather_scales_load(s, sd, &sl, k, scales);
                scales_ok = bad == s->nelem;
                if (!scales_ok)
                    note(p_scale, sizeof p_scale, "scale %llu is %g (must be finite and > 0)", (unsigned long long)bad,
                         feather_load_f32(FEATHER_F32, sd, bad));
            }
            if (layout_ok) {
                job.units = UNITS_CODES;
                job.fmt = L->fmt;
            }
        }
        const feather_tensor *rt = NULL;
        const void *rd = NULL;
        float *rdeq = NULL;     /* an fp8 reference, dequantised (v.deq) */
        uint16_t *rbf16 = NULL; /* and rounded to BF16 */
        int measure = 0;
        if (ref) {
            rt = feather_find(ref, t->name);
            feather_fp4 rf4 = {0}; /* an FP4 reference's scales */
            if (!rt && feather_ends_with(t->name, ".weight")) {
                /* compressed-tensors' FP4 codes are X.weight_packed */
                char pk[4200];
                snprintf(pk, sizeof pk, "%s_packed", t->name);
                if ((rt = feather_find(ref, pk)) && !feather_fp4_of(ref, rt, &rf4)) rt = NULL;
            }
            if (!rt) {
                note(p_ref, sizeof p_ref, "not in the reference %s", o->reference);
            } else if ((st = feather_tensor_data(ref, rt, &rd, err))) {
                free(scales);
                goto out;
            } else {
                vt->bytes_reference = rt->nbytes;
                if (feather_shard_hasher_wants(&hashers[rt->shard], ref, rt)) {
                    job.refh = &hashers[rt->shard];
                    job.rdata = rd;
                    job.rbytes = rt->nbytes;
                }
                const int rfp8 = feather_is_fp8(rt->dtype) || rf4.group || feather_fp4_of(ref, rt, &rf4);
                if (!conv && rfp8 && t->dtype == FEATHER_BF16 && t->ndim == 2) {
                    /* an fp8 weight the conversion dequantised: bf16(code x scale), to the bit */
                    char why[200];
                    if (!(rdeq = fp8_reference(&v, ref, rt, &rf4, rd, t->shape[0], t->shape[1], why, sizeof why)) ||
                        !(rbf16 = malloc(t->nbytes))) {
                        note(p_ref, sizeof p_ref, "%s", rdeq ? "out of memory" : why);
                    } else {
                        for (uint64_t j = 0; j < t->nelem; j++) rbf16[j] = feather_f32_to_bf16(rdeq[j]);
                        job.units = UNITS_COMPARE;
                        job.other = rbf16;
                    }
                } else if (!conv) {
                    if (rt->dtype != t->dtype || rt->nbytes != t->nbytes) {
                        note(p_ref, sizeof p_ref, "kept tensor differs from the reference");
                    } else {
                        job.units = UNITS_COMPARE;
                        job.other = rd;
                    }
                } else if (rfp8) {
                    char why[200];
                    if (!(rdeq = fp8_reference(&v, ref, rt, &rf4, rd, n, k, why, sizeof why))) note(p_ref, sizeof p_ref, "%s", why);
                    else measure = layout_ok && scales_ok;
                } else if (rt->ndim != 2 || rt->shape[0] != n || rt->shape[1] != k) {
                    note(p_ref, sizeof p_ref, "the reference tensor's shape is not the recorded [%llu, %llu]",
                         (unsigned long long)n, (unsigned long long)k);
                } else if (!feather_is_float(rt->dtype)) {
                    note(p_ref, sizeof p_ref, "the reference tensor is %s: errors are measured against a float or fp8 original",
                         feather_dtype_name(rt->dtype));
                } else {
                    measure = layout_ok && scales_ok;
                }
            }
        }

        weight_run w;
        memset(&w, 0, sizeof w);
        if (measure && (st = weight_begin(&v, &w, &job, t->name, L, d, scales, mode, group, n, k,
                                          rdeq ? FEATHER_F32 : rt->dtype, rdeq ? (const void *)rdeq : rd)) == FEATHER_OK)
            st = run_job(ctx, &job, err);
        else if (!measure)
            st = run_job(ctx, &job, err);
        if (!st) {
            if (job.hash && job.hash_value != rec)
                problem(vt, "XXH3 mismatch (recorded %016llx, computed %016llx): the bytes changed since the file was written",
                        (unsigned long long)rec, (unsigned long long)job.hash_value);
            else if (!job.hash && L->tensors)
                problem(vt, "no XXH3 recorded for this tensor");
            if (p_layout[0]) problem(vt, "%s", p_layout);
            uint64_t bad = atomic_load(&job.bad);
            if (bad) problem(vt, "%llu Inf/NaN fp8 codes", (unsigned long long)bad);
            if (p_scale[0]) problem(vt, "%s", p_scale);
            if (p_ref[0]) problem(vt, "%s", p_ref);
            if (job.units == UNITS_COMPARE && atomic_load(&job.differs))
                problem(vt, "kept tensor differs from the reference");
            if (measure && !vt->problem[0]) st = weight_end(&v, &w, vt);
        }
        weight_run_free(&w);
        free(scales);
        free(rbf16);
        if (rt) feather_tensor_release(ref, rt);
        feather_tensor_release(r, t);
        if (st) goto out;
        done += t->nbytes;
        if (o->progress) o->progress(o->progress_arg, done, total, t->name);
    }
    if (ref) { /* the reference's shard hashes, with the tensors not met on the way */
        for (unsigned s = 0; s < feather_shard_count(ref); s++)
            if ((st = feather_shard_hasher_finish(&hashers[s], ref, &ref_hashes[s], err))) goto out;
        for (unsigned s = 0; s < feather_shard_count(r); s++) {
            const char *rec = feather_metadata_get(r, s, "feather.source_xxh3");
            if (!source_matches(ref, ref_hashes, rec))
                file_problem(rep, "the reference %s does not match: %s was converted from a file with XXH3 %s",
                             o->reference, feather_shard_path(r, s), rec ? rec : "(none recorded)");
        }
        /* tensors of the original that did not make it into the conversion */
        for (size_t i = 0; i < feather_count(ref); i++) {
            const feather_tensor *rt = feather_tensor_at(ref, i);
            if (feather_find(r, rt->name) || fp8_companion(r, rt)) continue;
            feather_verify_tensor *vt = &rep->tensors[rep->count++];
            snprintf(vt->name, sizeof vt->name, "%s", rt->name);
            snprintf(vt->dtype, sizeof vt->dtype, "%s", feather_dtype_name(rt->dtype));
            vt->bytes_reference = rt->nbytes;
            problem(vt, "in the reference but missing from the converted file");
        }
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
        rep->nonfinite += vt->nonfinite;
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
    rep->seconds = feather_now_s() - t0;
    if (rep->file_problem[0])
        st = feather_fail(err, FEATHER_E_MISMATCH, "%s", rep->file_problem);
    else if (rep->problems || rep->threshold_failures)
        st = feather_fail(err, FEATHER_E_MISMATCH, "%s: %zu tensor(s) with problems, %zu under the thresholds", path,
                          rep->problems, rep->threshold_failures);
out:
    free(v.deq);
    for (unsigned s = 0; li && s < feather_shard_count(r); s++) {
        cJSON_Delete(li[s].tensors);
        feather_json_index_free(&li[s].tix);
    }
    free(li);
    free(ref_hashes);
    for (unsigned s = 0; hashers && s < feather_shard_count(ref); s++) feather_shard_hasher_free(&hashers[s]);
    free(hashers);
    feather_close(act);
    feather_close(ref);
    feather_close(r);
    if (rep && (st == FEATHER_OK || st == FEATHER_E_MISMATCH)) *out = rep;
    else feather_verify_report_free(rep);
    return st;
}

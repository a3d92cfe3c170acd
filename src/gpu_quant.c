/* Quantisation on a device: feather_quantize_on and its GPU path.
 *
 * The GPU path returns feather_quantize's bytes: the kernels (kernels/quant.hip) perform the
 * arithmetic of quant.h with the functions of kernels/quant_hd.h, which the CPU tests hold to
 * the library. What stays on the host is orchestration and the steps the CPU code defines
 * already: the histogram search of tensor mode (scale.c), the double sums over rows of F32
 * tensor mode, and the statistics' sums in row order.
 *
 * Streaming. A weight goes through in chunks of rows, each chunk on one of SLOTS streams with
 * its own page-locked staging buffers and device buffers. Iteration c waits for chunk c - SLOTS
 * (the previous user of its slot), lets a crew of the context's threads copy chunk c's weights
 * into staging, queues chunk c (upload, kernels, download), then lets the crew copy chunk
 * c - SLOTS's codes out of staging. While the CPU copies, the GPU works on the chunks queued
 * before, and the upload and download engines run side by side. Page-locked w or q (from
 * feather_host_alloc) are copied to or from directly, skipping the staging copy.
 * Channel, block and none modes finish each chunk on its own. Tensor and absmax modes need the
 * whole weight before the first cast: a first pass uploads every chunk into one device buffer
 * holding the weight and reduces it (pattern histogram or maximum), the host picks the scale,
 * and a second pass casts and downloads chunk by chunk. */
#include "internal.h"
#include "gpu_host.h"
#include "scale_internal.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef FEATHER_GPU
#include "../kernels/fk_api.h"
#include "../kernels/quant_hd.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>

#define SLOTS 4
/* Bytes per copy work item: one thread copies about 5 GB/s into page-locked memory, so the few
 * MiB of a round are cut small enough to keep every thread busy. */
#define PIECE ((size_t)64 << 10)
#define HIST_BINS 32768

/* Chunk size in bytes of input (tests and benchmarks change it). */
static size_t chunk_bytes = (size_t)8 << 20;

/* The buffers of a slot: weights in, codes out, scales out, row statistics out; each as
 * page-locked staging (h) and device memory (d). The codes' staging is a ring of SLOTS + 1
 * (the slots' h[B_Q] and one more), so that chunk c can be queued before the codes of chunk
 * c - SLOTS, which came back in the same slot, are copied out. */
enum { B_IN, B_Q, B_SC, B_ST, B_COUNT };

typedef struct slot {
    void *stream, *done; /* done: recorded after the chunk's last operation */
    void *h[B_COUNT], *d[B_COUNT];
    int64_t chunk;       /* chunk in flight in this slot, or -1 */
} slot;

/* Kept between calls (under the GPU lock); grow-only, freed by feather_gpu_release. */
static struct {
    int ready;
    slot sl[SLOTS];
    size_t cap[B_COUNT];            /* of every slot's buffers */
    void *hq_extra;                 /* the ring's last codes staging buffer */
    uint8_t *d_full;                /* the whole weight (tensor and absmax modes) */
    size_t cap_full;
    float *d_imp;
    size_t cap_imp;
    uint32_t *d_impq;
    size_t cap_impq;
    float *d_tot;
    size_t cap_tot;
    float *d_ratio;                 /* FEATHER_GRID_MAX ratios, then the candidates s and inv */
    unsigned ratio_nr;              /* the grid whose ratios d_ratio holds (0: none) */
    unsigned long long *d_misc;     /* [0] NaN/Inf count, [1] max |w| bits */
    unsigned long long *d_hist;     /* counts, then importance sums */
} G;

void feather_gpu_quant_set_chunk(size_t bytes) { chunk_bytes = bytes ? bytes : (size_t)8 << 20; }

static void free_slot_buffers(int b) {
    for (int i = 0; i < SLOTS; i++) {
        fk_host_free(G.sl[i].h[b]);
        fk_free(G.sl[i].d[b]);
        G.sl[i].h[b] = G.sl[i].d[b] = NULL;
    }
    if (b == B_Q) {
        fk_host_free(G.hq_extra);
        G.hq_extra = NULL;
    }
    G.cap[b] = 0;
}

/* Codes staging of chunk c. */
static uint8_t *hq(uint64_t c) {
    uint64_t i = c % (SLOTS + 1);
    return i < SLOTS ? (uint8_t *)G.sl[i].h[B_Q] : (uint8_t *)G.hq_extra;
}

void feather_gpu_quant_release_locked(void) {
    for (int i = 0; i < SLOTS && G.ready; i++) {
        slot *s = &G.sl[i];
        if (s->stream) fk_stream_sync(s->stream);
        fk_event_destroy(s->done);
        fk_stream_destroy(s->stream);
    }
    for (int b = 0; b < B_COUNT; b++) free_slot_buffers(b);
    fk_free(G.d_full);
    fk_free(G.d_imp);
    fk_free(G.d_impq);
    fk_free(G.d_tot);
    fk_free(G.d_ratio);
    fk_free(G.d_misc);
    fk_free(G.d_hist);
    memset(&G, 0, sizeof G);
}

/* ---- one call ---- */

typedef struct job {
    feather_ctx *ctx;
    int copiers;      /* most crew threads besides the caller (0: every other context thread) */
    const feather_quant_options *o;
    feather_error *err;
    const char *step; /* the GPU operation that failed */
    int rc;
    int dt;           /* FK_DT_* */
    size_t esz;
    const uint8_t *w;
    uint64_t n, k, gpr; /* gpr: scales per row in the fused pass */
    int packed, e4m3;
    uint8_t *q;
    float *scales;
    int w_pinned, q_pinned;
    uint64_t rows; /* per chunk */
    uint64_t nch;
    double *row_stats; /* n × 3, or NULL */
    fk_quant_params base;
} job;

enum { PASS_FUSED, PASS_LOAD, PASS_CAST };

#define TRY(what, call)                                                                      \
    do {                                                                                     \
        if (!j->rc && (j->rc = (call)) != 0) j->step = (what);                               \
    } while (0)

static int setup(void) {
    if (G.ready) return 0;
    int rc = 0;
    for (int i = 0; i < SLOTS && !rc; i++) {
        G.sl[i].chunk = -1;
        rc = fk_stream_create(&G.sl[i].stream);
        if (!rc) rc = fk_event_create(&G.sl[i].done);
    }
    if (!rc) rc = fk_malloc((void **)&G.d_ratio, 3 * FEATHER_GRID_MAX * sizeof(float));
    if (!rc) rc = fk_malloc((void **)&G.d_misc, 4 * sizeof(unsigned long long));
    if (!rc) rc = fk_malloc((void **)&G.d_hist, 2 * HIST_BINS * sizeof(unsigned long long));
    G.ready = 1; /* partial setups are freed by release */
    if (rc) feather_gpu_quant_release_locked();
    return rc;
}

/* Staging and device buffers of every slot for chunks of j->rows rows. */
static void reserve_slots(job *j, int pass) {
    const size_t need[B_COUNT] = {pass == PASS_CAST ? 0 : (size_t)(j->rows * j->k * j->esz), (size_t)(j->rows * j->k),
                                  (size_t)(j->rows * j->gpr) * sizeof(float), (size_t)j->rows * 3 * sizeof(double)};
    for (int b = 0; b < B_COUNT && !j->rc; b++) {
        if (G.cap[b] >= need[b]) continue;
        free_slot_buffers(b);
        size_t c = need[b] + need[b] / 4; /* slack for the next, slightly larger weight */
        for (int i = 0; i < SLOTS; i++) {
            TRY("page-locked allocation", fk_host_alloc(&G.sl[i].h[b], c));
            TRY("device allocation", fk_malloc(&G.sl[i].d[b], c));
        }
        if (b == B_Q) TRY("page-locked allocation", fk_host_alloc(&G.hq_extra, c));
        if (!j->rc) G.cap[b] = c;
        else free_slot_buffers(b); /* the next call starts this kind over */
    }
}

/* ---- host copies between the caller's memory and the staging buffers ----
 * Each pipeline iteration hands out one round of pieces. Waking a pool per round costs more
 * than copying a few MiB (measured on a 16-core host: chunks of 2 MiB went at a fifth of the
 * upload's speed that way), so a call of several chunks takes a crew of the context's threads
 * once, for the whole call (one feather_parallel_for, run from a helper thread), whose members
 * poll for rounds; the calling thread publishes each round and copies too. */

typedef struct piece {
    uint8_t *dst;
    const uint8_t *src;
    size_t len, count, dstride, sstride; /* count blocks of len bytes */
} piece;

typedef struct crew {
    piece *p[2];             /* the pieces of rounds of either parity */
    size_t n[2], cap[2];
    _Atomic uint64_t next;   /* round << 32 | next piece of that round */
    atomic_size_t finished;  /* pieces of the current round copied */
    atomic_uint round;       /* last round published */
    atomic_int stop;
    feather_ctx *ctx;
    int workers;             /* polling threads besides the caller (0: none started) */
    pthread_t helper;
} crew;

static void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void copy_piece(const piece *p) {
    for (size_t r = 0; r < p->count; r++) memcpy(p->dst + r * p->dstride, p->src + r * p->sstride, p->len);
}

/* Takes and copies pieces of round r until none is left (a piece is taken by one CAS on the
 * round-tagged counter, so a thread still finishing round r - 1 can never take one of r). */
static void crew_take(crew *k, unsigned r) {
    const piece *p = k->p[r & 1];
    const size_t n = k->n[r & 1];
    for (;;) {
        uint64_t v = atomic_load(&k->next);
        if ((unsigned)(v >> 32) != r || (size_t)(v & 0xffffffffu) >= n) return;
        if (!atomic_compare_exchange_weak(&k->next, &v, v + 1)) continue;
        copy_piece(&p[v & 0xffffffffu]);
        atomic_fetch_add(&k->finished, 1);
    }
}

static void crew_loop(void *arg, size_t b, size_t e, int w) {
    (void)b, (void)e, (void)w;
    crew *k = arg;
    unsigned seen = atomic_load(&k->round), idle = 0;
    while (!atomic_load(&k->stop)) {
        unsigned r = atomic_load(&k->round);
        if (r != seen) {
            seen = r;
            crew_take(k, r);
            idle = 0;
        } else if (++idle < 1u << 14) {
            relax();
        } else {
            sched_yield(); /* the GPU is busy for a while: leave the core to others */
        }
    }
}

static void *crew_helper(void *arg) {
    crew *k = arg;
    feather_parallel_for(k->ctx, (size_t)k->workers, 1, crew_loop, k);
    return NULL;
}

/* Threads for a call of several chunks: by default every thread of the context besides the
 * caller (one thread copies ~5 GB/s into page-locked memory, the host's memory many times
 * that), at most max when max > 0, none when the context has one. */
static void crew_start(crew *k, feather_ctx *ctx, uint64_t chunks, int max) {
    int t = feather_ctx_threads(ctx) - 1;
    k->ctx = ctx;
    k->workers = 0;
    if (max > 0 && t > max) t = max;
    if (chunks < 2 || t < 1) return;
    k->workers = t;
    if (pthread_create(&k->helper, NULL, crew_helper, k)) k->workers = 0;
}

static void crew_stop(crew *k) {
    if (k->workers) {
        atomic_store(&k->stop, 1);
        pthread_join(k->helper, NULL);
    }
    free(k->p[0]);
    free(k->p[1]);
}

/* Pieces go into the round being built (the one after the last published). */
static int add_piece(crew *k, piece p) {
    int b = (atomic_load(&k->round) + 1) & 1;
    if (k->n[b] == k->cap[b]) {
        size_t cap = k->cap[b] ? 2 * k->cap[b] : 64;
        piece *np = realloc(k->p[b], cap * sizeof *np);
        if (!np) return -1;
        k->p[b] = np;
        k->cap[b] = cap;
    }
    k->p[b][k->n[b]++] = p;
    return 0;
}

/* A contiguous copy, cut into pieces of about PIECE bytes. */
static int add_flat(crew *k, uint8_t *dst, const uint8_t *src, size_t len) {
    for (size_t o = 0; o < len; o += PIECE)
        if (add_piece(k, (piece){dst + o, src + o, len - o < PIECE ? len - o : PIECE, 1, 0, 0})) return -1;
    return 0;
}

static void pool_worker(void *arg, size_t b, size_t e, int w) {
    (void)w;
    const piece *p = arg;
    for (size_t i = b; i < e; i++) copy_piece(&p[i]);
}

/* Copies the round built so far, with the crew (or the context's pool when there is none). */
static void crew_run(crew *k) {
    unsigned r = atomic_load(&k->round) + 1;
    size_t n = k->n[r & 1];
    if (!n) return;
    if (!k->workers) {
        feather_parallel_for(k->ctx, n, 1, pool_worker, k->p[r & 1]);
        k->n[r & 1] = 0;
        return;
    }
    atomic_store(&k->finished, 0);
    atomic_store(&k->next, (uint64_t)r << 32);
    atomic_store(&k->round, r);
    crew_take(k, r);
    while (atomic_load(&k->finished) < n) relax();
    k->n[(r + 1) & 1] = 0; /* the next round is built where round r - 1 was */
}

/* Where the time of GPU calls goes, for the benchmark. */
static struct {
    double copy, wait, enqueue, total;
    uint64_t calls, chunks;
} prof;

void feather_gpu_quant_profile(feather_gpu_quant_prof *out, int reset) {
    if (out) {
        out->copy_s = prof.copy;
        out->wait_s = prof.wait;
        out->enqueue_s = prof.enqueue;
        out->total_s = prof.total;
        out->calls = prof.calls;
        out->chunks = prof.chunks;
    }
    if (reset) memset(&prof, 0, sizeof prof);
}

/* ---- the pipeline ---- */

static uint64_t chunk_r0(const job *j, uint64_t c) { return c * j->rows; }
static uint64_t chunk_rows(const job *j, uint64_t c) {
    uint64_t r0 = chunk_r0(j, c);
    return j->n - r0 < j->rows ? j->n - r0 : j->rows;
}

/* Queues chunk c of a pass on slot s. */
static void enqueue(job *j, int pass, slot *s, uint64_t c, float scale, int stats) {
    const uint64_t r0 = chunk_r0(j, c), rows = chunk_rows(j, c);
    const size_t in = (size_t)(rows * j->k * j->esz), nq = (size_t)(rows * j->k);
    fk_quant_params p = j->base;
    p.rows = (int64_t)rows;
    if (pass == PASS_CAST) {
        p.w = G.d_full + r0 * j->k * j->esz;
    } else {
        uint8_t *dst = pass == PASS_LOAD ? G.d_full + r0 * j->k * j->esz : (uint8_t *)s->d[B_IN];
        const uint8_t *src = j->w_pinned ? j->w + r0 * j->k * j->esz : (uint8_t *)s->h[B_IN];
        TRY("upload", fk_to_device_async(dst, src, in, s->stream));
        p.w = dst;
    }
    if (pass == PASS_LOAD) {
        if (j->base.hist) TRY("histogram kernel", fk_quant_hist(&p, s->stream));
        else TRY("maximum kernel", fk_quant_amax(&p, s->stream));
    } else {
        p.q = (uint8_t *)s->d[B_Q];
        p.scale = scale;
        if (j->gpr) {
            p.scales = (float *)s->d[B_SC];
            TRY("search kernel", fk_quant_search_cast(&p, s->stream));
        } else {
            TRY("cast kernel", fk_quant_cast(&p, s->stream));
        }
        if (stats) {
            p.row_stats = (double *)s->d[B_ST];
            TRY("statistics kernel", fk_quant_stats(&p, s->stream));
            TRY("download", fk_to_host_async((double *)s->h[B_ST], (double *)s->d[B_ST], (size_t)rows * 3 * sizeof(double), s->stream));
        }
        if (j->gpr)
            TRY("download", fk_to_host_async((float *)s->h[B_SC], (float *)s->d[B_SC], (size_t)(rows * j->gpr) * sizeof(float), s->stream));
        if (!j->q_pinned) TRY("download", fk_to_host_async(hq(c), (uint8_t *)s->d[B_Q], nq, s->stream));
        else if (!j->packed) TRY("download", fk_to_host_async(j->q + r0 * j->k, (uint8_t *)s->d[B_Q], nq, s->stream));
        else
            TRY("download", fk_to_host_2d_async(j->q + 16 * r0, (size_t)(16 * j->n), (uint8_t *)s->d[B_Q], (size_t)(16 * rows),
                                                 (size_t)(16 * rows), (size_t)(j->k / 16), s->stream));
    }
    TRY("event", fk_event_record(s->done, s->stream));
    s->chunk = (int64_t)c;
}

/* A finished chunk's scales and statistics, out of staging (small: this thread copies them). */
static void retire(job *j, int pass, slot *s) {
    const uint64_t c = (uint64_t)s->chunk, r0 = chunk_r0(j, c), rows = chunk_rows(j, c);
    s->chunk = -1;
    if (pass == PASS_LOAD) return;
    if (j->gpr) memcpy(j->scales + r0 * j->gpr, (float *)s->h[B_SC], (size_t)(rows * j->gpr) * sizeof(float));
    if (j->row_stats) memcpy(j->row_stats + 3 * r0, (double *)s->h[B_ST], (size_t)rows * 3 * sizeof(double));
}

/* The pieces copying finished chunk c's codes out of staging into q. */
static int codes_out(job *j, uint64_t c, crew *cp) {
    const uint64_t r0 = chunk_r0(j, c), rows = chunk_rows(j, c);
    if (!j->packed) return add_flat(cp, j->q + r0 * j->k, hq(c), (size_t)(rows * j->k));
    /* the chunk's (K/16, rows, 16) slabs go 16·N apart in the output */
    size_t slab = (size_t)(16 * rows), per = slab >= PIECE ? 1 : PIECE / slab, nslab = (size_t)(j->k / 16);
    for (size_t b = 0; b < nslab; b += per)
        if (add_piece(cp, (piece){j->q + b * 16 * j->n + 16 * r0, hq(c) + b * slab, slab,
                                  nslab - b < per ? nslab - b : per, (size_t)(16 * j->n), slab}))
            return -1;
    return 0;
}

static feather_status drain(job *j) {
    for (int i = 0; i < SLOTS; i++) {
        slot *s = &G.sl[i];
        if (s->chunk >= 0) {
            int rc = fk_event_sync(s->done);
            if (rc && !j->rc) j->rc = rc, j->step = "kernel run or copy";
            s->chunk = -1;
        }
    }
    return FEATHER_OK;
}

static feather_status gpu_failed(job *j) {
    char pre[320];
    return feather_fail(j->err, FEATHER_E_UNSUPPORTED, "%sGPU quantisation: %s failed: %s",
                        feather_tensor_prefix(j->o->name, pre, sizeof pre), j->step ? j->step : "?", fk_error_string(j->rc));
}

static feather_status run_pass(job *j, int pass, float scale) {
    char pre[320];
    feather_status st = FEATHER_OK;
    crew cp;
    memset(&cp, 0, sizeof cp);
    reserve_slots(j, pass);
    if (j->rc) return gpu_failed(j);
    crew_start(&cp, j->ctx, j->nch, j->copiers);
    const int stats = j->row_stats != NULL;
    /* Iteration c: wait for chunk c - SLOTS (its slot is chunk c's), copy chunk c in, queue
     * it, then copy chunk c - SLOTS's codes out while the GPU works. */
    for (uint64_t c = 0; c < j->nch + SLOTS && !j->rc; c++) {
        slot *s = &G.sl[c % SLOTS];
        if (feather_cancelled()) {
            drain(j);
            st = feather_fail(j->err, FEATHER_E_CANCELLED, "%scancelled", feather_tensor_prefix(j->o->name, pre, sizeof pre));
            break;
        }
        int64_t out = -1;
        if (s->chunk >= 0) {
            double t0 = feather_now_s();
            TRY("kernel run or copy", fk_event_sync(s->done));
            prof.wait += feather_now_s() - t0;
            if (j->rc) break;
            out = s->chunk;
            retire(j, pass, s);
        }
        double t1 = feather_now_s();
        int bad = 0;
        if (c < j->nch && pass != PASS_CAST && !j->w_pinned) {
            uint64_t r0 = chunk_r0(j, c);
            bad |= add_flat(&cp, (uint8_t *)s->h[B_IN], j->w + r0 * j->k * j->esz, (size_t)(chunk_rows(j, c) * j->k * j->esz));
            crew_run(&cp);
        }
        double t2 = feather_now_s();
        if (c < j->nch && !bad) enqueue(j, pass, s, c, scale, stats);
        double t3 = feather_now_s();
        if (out >= 0 && pass != PASS_LOAD && !j->q_pinned) {
            bad |= codes_out(j, (uint64_t)out, &cp);
            crew_run(&cp);
        }
        if (bad) {
            drain(j);
            st = feather_fail(j->err, FEATHER_E_NOMEM, "out of memory");
            break;
        }
        prof.copy += (t2 - t1) + (feather_now_s() - t3);
        prof.enqueue += t3 - t2;
        prof.chunks += c < j->nch;
    }
    drain(j);
    crew_stop(&cp);
    if (!st && j->rc) st = gpu_failed(j);
    return st;
}

/* Reads the NaN/Inf counter (after the work that fed it is done). */
static uint64_t read_nonfinite(job *j) {
    unsigned long long v = 0;
    TRY("download", fk_to_host(&v, &G.d_misc[0], sizeof v));
    return v;
}

static feather_status nonfinite_fail(job *j, uint64_t nf) {
    char pre[320];
    return feather_fail_nonfinite(j->err, feather_tensor_prefix(j->o->name, pre, sizeof pre), nf, "values");
}

/* The scale of tensor and absmax modes, from the weight held in G.d_full (quant.h steps 1-6). */
static feather_status tensor_scale(job *j, feather_dtype dt, float *scale) {
    const feather_quant_options *o = j->o;
    unsigned nr = o->mode == FEATHER_SCALE_ABSMAX ? 1 : feather_grid_size(o->grid);
    float r[FEATHER_GRID_MAX];
    feather_grid_ratios(nr, r);
    scale_kernels kn = feather_scale_kernels(feather_ctx_simd(j->ctx));
    if (j->base.hist) {
        uint64_t *h = malloc(2 * HIST_BINS * sizeof *h);
        if (!h) return feather_fail(j->err, FEATHER_E_NOMEM, "out of memory");
        TRY("download", fk_to_host(h, G.d_hist, 2 * HIST_BINS * sizeof *h));
        feather_status st = j->rc ? gpu_failed(j)
                                  : feather_scale_hist_pick(o, dt, NULL, h, o->importance ? h + HIST_BINS : NULL, r,
                                                            nr, &kn, scale, NULL, j->err);
        free(h);
        return st;
    }
    unsigned long long bits = 0;
    TRY("download", fk_to_host(&bits, &G.d_misc[1], sizeof bits));
    uint64_t nf = read_nonfinite(j);
    if (j->rc) return gpu_failed(j);
    if (nf && !o->allow_nonfinite) return nonfinite_fail(j, nf);
    float sa = fkq_sabs(fkq_float((uint32_t)bits), fkq_fmt_of(j->e4m3));
    if (sa == 0 || nr == 1) {
        *scale = sa == 0 ? 1.0f : sa;
        return FEATHER_OK;
    }
    /* F32 tensor mode: each row's totals on the GPU, their double sum in row order here */
    float cand[2 * FEATHER_GRID_MAX];
    kn.cands(sa, r, nr, cand, cand + FEATHER_GRID_MAX);
    size_t tb = (size_t)(j->n * nr) * sizeof(float);
    float *tot = malloc(tb);
    if (!tot) return feather_fail(j->err, FEATHER_E_NOMEM, "out of memory");
    TRY("device allocation", feather_gpu_grow((void **)&G.d_tot, &G.cap_tot, tb));
    TRY("upload", fk_to_device(G.d_ratio + FEATHER_GRID_MAX, cand, sizeof cand));
    fk_quant_params p = j->base;
    p.w = G.d_full;
    p.rows = (int64_t)j->n;
    p.nr = (int)nr;
    p.cand_s = G.d_ratio + FEATHER_GRID_MAX;
    p.cand_inv = G.d_ratio + 2 * FEATHER_GRID_MAX;
    p.totals = G.d_tot;
    TRY("synchronisation", fk_synchronize());
    TRY("row totals kernel", fk_quant_row_totals(&p, G.sl[0].stream));
    TRY("kernel run", fk_stream_sync(G.sl[0].stream));
    TRY("download", fk_to_host(tot, G.d_tot, tb));
    if (j->rc) {
        free(tot);
        return gpu_failed(j);
    }
    double ob[FEATHER_GRID_MAX];
    for (unsigned q = 0; q < nr; q++) ob[q] = 0;
    for (uint64_t row = 0; row < j->n; row++)
        for (unsigned q = 0; q < nr; q++) ob[q] += (double)tot[row * nr + q];
    *scale = cand[feather_scale_argmin_d(ob, nr)];
    free(tot);
    return FEATHER_OK;
}

static feather_status quantize_locked(job *j, feather_dtype dt, feather_quant_stats *stats) {
    const feather_quant_options *o = j->o;
    feather_status st = FEATHER_OK;
    int rc = setup();
    if (rc) {
        j->rc = rc;
        j->step = "stream setup";
        return gpu_failed(j);
    }
    const int two_pass = o->mode == FEATHER_SCALE_ABSMAX || o->mode == FEATHER_SCALE_TENSOR;
    const unsigned nr = feather_grid_size(o->grid);
    float r[FEATHER_GRID_MAX];
    feather_grid_ratios(nr, r);
    const float *imp = o->mode == FEATHER_SCALE_NONE || o->mode == FEATHER_SCALE_ABSMAX ? NULL : o->importance;
    fk_quant_params *b = &j->base;
    memset(b, 0, sizeof *b);
    b->dtype = j->dt;
    b->e4m3 = j->e4m3;
    b->k = (int64_t)j->k;
    b->group = o->mode == FEATHER_SCALE_BLOCK ? (int64_t)o->group : (int64_t)j->k;
    b->nr = (int)nr;
    b->ratios = G.d_ratio;
    b->packed = j->packed;
    b->nonfinite = &G.d_misc[0];
    b->amax_bits = (unsigned *)&G.d_misc[1];
    j->gpr = o->mode == FEATHER_SCALE_CHANNEL || o->mode == FEATHER_SCALE_BLOCK ? j->k / (uint64_t)b->group : 0;
    if (G.ratio_nr != nr) { /* the ratios depend on the grid size alone */
        TRY("upload", fk_to_device(G.d_ratio, r, sizeof r));
        G.ratio_nr = j->rc ? 0 : nr;
    }
    TRY("device fill", fk_memset(G.d_misc, 0, 4 * sizeof(unsigned long long)));
    if (imp && !(o->mode == FEATHER_SCALE_TENSOR && dt != FEATHER_F32)) {
        TRY("device allocation", feather_gpu_grow((void **)&G.d_imp, &G.cap_imp, (size_t)j->k * 4));
        TRY("upload", fk_to_device(G.d_imp, imp, (size_t)j->k * 4));
        b->imp = G.d_imp;
    }
    if (o->mode == FEATHER_SCALE_TENSOR && dt != FEATHER_F32) {
        b->hist = G.d_hist;
        TRY("device fill", fk_memset(G.d_hist, 0, 2 * HIST_BINS * sizeof(unsigned long long)));
        if (imp) {
            uint32_t *iq = malloc((size_t)j->k * sizeof *iq);
            if (!iq) return feather_fail(j->err, FEATHER_E_NOMEM, "out of memory");
            feather_scale_impq(imp, j->k, iq);
            TRY("device allocation", feather_gpu_grow((void **)&G.d_impq, &G.cap_impq, (size_t)j->k * 4));
            TRY("upload", fk_to_device(G.d_impq, iq, (size_t)j->k * 4));
            free(iq);
            b->impq = G.d_impq;
            b->hist_w = G.d_hist + HIST_BINS;
        }
    }
    if (two_pass) TRY("device allocation", feather_gpu_grow((void **)&G.d_full, &G.cap_full, (size_t)(j->n * j->k * j->esz)));
    /* setup copies and fills ran on the default stream; the pipeline's streams do not wait
     * for it */
    TRY("synchronisation", fk_synchronize());
    if (j->rc) return gpu_failed(j);

    float scale = 1.0f;
    if (two_pass) {
        if ((st = run_pass(j, PASS_LOAD, 0))) return st;
        if ((st = tensor_scale(j, dt, &scale))) return st;
        if (j->scales) j->scales[0] = scale;
        TRY("device fill", fk_memset(G.d_misc, 0, sizeof(unsigned long long)));
        TRY("synchronisation", fk_synchronize());
        if (j->rc) return gpu_failed(j);
        st = run_pass(j, PASS_CAST, scale);
    } else {
        if (o->mode == FEATHER_SCALE_NONE && j->scales) j->scales[0] = 1.0f;
        st = run_pass(j, PASS_FUSED, 1.0f);
    }
    if (st) return st;
    uint64_t nf = read_nonfinite(j);
    if (j->rc) return gpu_failed(j);
    if (nf && !o->allow_nonfinite) return nonfinite_fail(j, nf);
    if (stats) {
        feather_quant_stats t = {.nonfinite = nf};
        for (uint64_t row = 0; row < j->n; row++) {
            t.sum_sq += j->row_stats[3 * row];
            t.err_sq += j->row_stats[3 * row + 1];
            if (j->row_stats[3 * row + 2] > t.max_abs_err) t.max_abs_err = j->row_stats[3 * row + 2];
        }
        *stats = t;
    }
    return FEATHER_OK;
}

static feather_status quantize_gpu(feather_ctx *ctx, const feather_quant_options *o, feather_dtype dt,
                                   const void *w, uint64_t n, uint64_t k, int packed, uint8_t *q,
                                   float *scales, feather_quant_stats *stats, int copiers,
                                   feather_error *err) {
    char desc[256], pre[320];
    if (k > 0x7fffffff)
        return feather_fail(err, FEATHER_E_UNSUPPORTED, "%sdevice gpu: rows of %llu weights are too long (2^31 at most)",
                            feather_tensor_prefix(o->name, pre, sizeof pre), (unsigned long long)k);
    job j = {.ctx = ctx, .copiers = copiers, .o = o, .err = err, .dt = dt == FEATHER_F16 ? FK_DT_F16 : dt == FEATHER_BF16 ? FK_DT_BF16 : FK_DT_F32,
             .esz = dt == FEATHER_F32 ? 4 : 2, .w = w, .n = n, .k = k, .packed = packed,
             .e4m3 = o->format == FEATHER_FP8_E4M3FN, .q = q, .scales = scales};
    size_t total = (size_t)(n * k) * j.esz, target = total / 8;
    if (target > chunk_bytes) target = chunk_bytes;
    size_t floor = chunk_bytes < ((size_t)1 << 20) ? chunk_bytes : (size_t)1 << 20;
    if (target < floor) target = floor; /* smaller chunks cost more than they overlap */
    j.rows = target / (size_t)(k * j.esz);
    if (j.rows < 1) j.rows = 1;
    if (j.rows > n) j.rows = n;
    j.nch = (n + j.rows - 1) / j.rows;
    j.w_pinned = feather_host_pinned(w, total);
    j.q_pinned = feather_host_pinned(q, (size_t)(n * k));
    if (stats && !(j.row_stats = malloc((size_t)n * 3 * sizeof(double))))
        return feather_fail(err, FEATHER_E_NOMEM, "out of memory for statistics");
    feather_status st;
    double t0 = feather_now_s();
    if (!feather_gpu_lock(desc, sizeof desc)) {
        st = feather_fail(err, FEATHER_E_UNSUPPORTED, "device gpu: no usable GPU: %s", desc);
    } else {
        st = quantize_locked(&j, dt, stats);
        if (j.rc && G.ready) { /* a failed GPU step may leave work queued: finish it */
            for (int i = 0; i < SLOTS; i++) fk_stream_sync(G.sl[i].stream);
        }
    }
    prof.total += feather_now_s() - t0;
    prof.calls++;
    feather_gpu_unlock();
    free(j.row_stats);
    return st;
}

#else /* no GPU backend */

void feather_gpu_quant_set_chunk(size_t bytes) { (void)bytes; }
void feather_gpu_quant_profile(feather_gpu_quant_prof *out, int reset) {
    (void)reset;
    if (out) memset(out, 0, sizeof *out);
}
void feather_gpu_quant_release_locked(void) {}

static feather_status quantize_gpu(feather_ctx *ctx, const feather_quant_options *o, feather_dtype dt,
                                   const void *w, uint64_t n, uint64_t k, int packed, uint8_t *q,
                                   float *scales, feather_quant_stats *stats, int copiers,
                                   feather_error *err) {
    (void)ctx, (void)o, (void)dt, (void)w, (void)n, (void)k, (void)packed, (void)q, (void)scales, (void)stats;
    (void)copiers;
    char desc[256];
    feather_gpu_available(desc, sizeof desc);
    return feather_fail(err, FEATHER_E_UNSUPPORTED, "device gpu: no usable GPU: %s", desc);
}

#endif

feather_status feather_gpu_quantize(feather_ctx *ctx, int copiers, const feather_quant_options *opts,
                                    feather_dtype dtype, const void *w, uint64_t n, uint64_t k, int packed,
                                    uint8_t *q, float *scales, feather_quant_stats *stats, feather_error *err) {
    if (!opts) return feather_quantize(ctx, opts, dtype, w, n, k, packed, q, scales, stats, err);
    if ((uint64_t)n * k == 0) { /* nothing to compute, but the device must exist */
        char desc[256];
        if (!feather_gpu_available(desc, sizeof desc))
            return feather_fail(err, FEATHER_E_UNSUPPORTED, "device gpu: no usable GPU: %s", desc);
        return feather_quantize(ctx, opts, dtype, w, n, k, packed, q, scales, stats, err);
    }
    /* the CPU's checks, in the CPU's order, so that both devices refuse the same arguments */
    feather_status st = feather_scale_check_options(opts, dtype, n, k, err);
    if (st) return st;
    if (packed && k % 16) {
        char pre[320];
        return feather_fail(err, FEATHER_E_ARG, "%sK = %llu is not a multiple of 16, cannot prepack",
                            feather_tensor_prefix(opts->name, pre, sizeof pre), (unsigned long long)k);
    }
    return quantize_gpu(ctx, opts, dtype, w, n, k, packed, q, scales, stats, copiers, err);
}

feather_status feather_quantize_on(feather_ctx *ctx, feather_device dev, const feather_quant_options *opts,
                                   feather_dtype dtype, const void *w, uint64_t n, uint64_t k, int packed,
                                   uint8_t *q, float *scales, feather_quant_stats *stats, feather_error *err) {
    if (dev == FEATHER_DEVICE_AUTO) dev = feather_gpu_available(NULL, 0) ? FEATHER_DEVICE_GPU : FEATHER_DEVICE_CPU;
    if (dev != FEATHER_DEVICE_GPU) return feather_quantize(ctx, opts, dtype, w, n, k, packed, q, scales, stats, err);
    return feather_gpu_quantize(ctx, 0, opts, dtype, w, n, k, packed, q, scales, stats, err);
}

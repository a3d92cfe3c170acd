/* Casting a whole weight with given scales, into plain (N, K) or prepacked (K/16, N, 16) codes.
 *
 * Work is split into strips of STRIP_ROWS rows, handed to the context's threads. Inside a
 * strip the tile kernels (quant_kernels.h) cast 4 rows at a time, 64 columns per step, and
 * write whole 64-byte lines: for packed output a line is the 4 rows' pieces of one slab, so
 * the packed layout is written directly (no plain intermediate) and sequentially within each
 * slab. Packed output walks the strip one chunk of CHUNK columns (16 slabs) at a time, so the
 * strip's 16 read streams and 16 write streams stay short; plain output walks 4 rows over the
 * whole K. Large outputs are written with streaming stores (FEATHER_STREAM_MIN). Leftovers -
 * rows beyond a multiple of 4, columns beyond a multiple of 64, and block sizes that are not
 * multiples of 64 - go through the one-row kernels, which store 16-byte pieces.
 *
 * A row is cut into runs that share one scale; each run costs one division (inv = 1/s) per
 * row and one kernel call. NaN/Inf inputs are detected by the kernels as they go; only a strip
 * that has some is counted exactly. Statistics are accumulated per row in 8 fixed lanes (see
 * quant_kernels.h), visiting each row's columns in order, and summed in row order at the end,
 * so they are the same for any thread count, SIMD level or output layout. */
#include "internal.h"
#include "quant_kernels.h"

#include <stdio.h>
#include <stdlib.h>

#define STRIP_ROWS 16
#define CHUNK 256 /* columns per visit of a strip in packed mode: 16 slabs */

typedef struct row_stats {
    double sum_sq, err_sq, max_err;
} row_stats;

struct job {
    feather_dtype dt;
    feather_fp8 fmt;
    size_t esz;
    const unsigned char *w;
    uint64_t n, k, group; /* group: columns per scale (k unless block mode) */
    uint64_t ldn;         /* packed: the whole weight's N, where rows [0, n) are a band of it */
    uint64_t tile_c0, tile_c1; /* columns [tile_c0, tile_c1) go through the 4-row kernels */
    feather_scale_mode mode;
    const float *scales;
    int packed, nt;
    uint64_t phase; /* packed: rows r ≡ phase (mod 4) start an aligned 64-byte line */
    uint8_t *q;
    feather_cast_fn cast, cast_unit;
    feather_tile_fn tile, tile_unit;
    feather_stats_fn stats; /* NULL: no statistics */
    row_stats *rows;
    _Atomic uint64_t nonfinite;
    atomic_int cancelled;
};

static inline float scale_at(const struct job *j, uint64_t r, uint64_t c) {
    if (!j->scales) return 1.0f;
    if (j->mode == FEATHER_SCALE_CHANNEL) return j->scales[r];
    if (j->mode == FEATHER_SCALE_BLOCK) return j->scales[r * (j->k / j->group) + c / j->group];
    return j->scales[0];
}

static inline uint8_t *q_at(const struct job *j, uint64_t r, uint64_t c) {
    return j->packed ? j->q + (c / 16) * 16 * j->ldn + 16 * r : j->q + r * j->k + c;
}
static inline size_t q_piece_stride(const struct job *j) { return j->packed ? (size_t)(16 * j->ldn) : 16; }

/* Columns [c0, c1) of row r with the one-row kernels (plus statistics). */
static int row_part(struct job *j, uint64_t r, uint64_t c0, uint64_t c1, feather_stat_lanes *lanes) {
    int bad = 0;
    while (c0 < c1) {
        uint64_t e = (c0 / j->group + 1) * j->group;
        if (e > c1) e = c1;
        float s = scale_at(j, r, c0), inv = 1.0f / s;
        const unsigned char *src = j->w + (r * j->k + c0) * j->esz;
        uint8_t *dst = q_at(j, r, c0);
        bad |= (inv == 1.0f ? j->cast_unit : j->cast)(src, e - c0, inv, dst, q_piece_stride(j));
        if (j->stats) j->stats(src, e - c0, dst, q_piece_stride(j), s, j->fmt, lanes);
        c0 = e;
    }
    return bad;
}

/* Columns [c0, c1) (c1 - c0 a multiple of 64, inside [tile_c0, tile_c1)) of rows r … r+3. */
static int quad_part(struct job *j, uint64_t r, uint64_t c0, uint64_t c1, feather_stat_lanes *lanes) {
    int bad = 0;
    while (c0 < c1) {
        uint64_t e = (c0 / j->group + 1) * j->group;
        if (e > c1) e = c1;
        float s[4], inv[4];
        int unit = 1;
        for (int i = 0; i < 4; i++) {
            s[i] = scale_at(j, r + (uint64_t)i, c0);
            inv[i] = 1.0f / s[i];
            unit &= inv[i] == 1.0f;
        }
        const unsigned char *src = j->w + (r * j->k + c0) * j->esz;
        uint8_t *dst = q_at(j, r, c0);
        size_t step = j->packed ? (size_t)(16 * j->ldn) : (size_t)j->k;
        bad |= (unit ? j->tile_unit : j->tile)(src, j->k, e - c0, inv, dst, step, j->packed, j->nt);
        if (j->stats)
            for (int i = 0; i < 4; i++)
                j->stats(src + (size_t)i * j->k * j->esz, e - c0, q_at(j, r + (uint64_t)i, c0),
                         q_piece_stride(j), s[i], j->fmt, &lanes[i]);
        c0 = e;
    }
    return bad;
}

/* Strip st: rows [phase + 16·st, phase + 16·(st+1)), the first one starting at row 0. */
static inline uint64_t strip_start(const struct job *j, size_t st) {
    return st ? j->phase + (uint64_t)st * STRIP_ROWS : 0;
}

static void strip_fn(void *arg, size_t b, size_t e, int worker) {
    (void)worker;
    struct job *j = arg;
    feather_stat_lanes lanes[STRIP_ROWS + 4];
    for (size_t st = b; st < e; st++) {
        if (feather_cancelled()) {
            atomic_store(&j->cancelled, 1);
            break;
        }
        uint64_t r0 = strip_start(j, st), r1 = strip_start(j, st + 1);
        if (r1 > j->n) r1 = j->n;
        /* rows [r0, ra) and [rq, r1) one by one, [ra, rq) in quads */
        uint64_t ra = r0 + (j->phase + 4 - r0 % 4) % 4;
        if (ra > r1) ra = r1;
        uint64_t rq = ra + (r1 - ra) / 4 * 4;
        int bad = 0;
        if (j->stats) memset(lanes, 0, sizeof lanes);
        if (j->packed) {
            for (uint64_t c = j->tile_c0; c < j->tile_c1; c += CHUNK) {
                uint64_t ce = c + CHUNK < j->tile_c1 ? c + CHUNK : j->tile_c1;
                for (uint64_t r = r0; r < ra; r++) bad |= row_part(j, r, c, ce, &lanes[r - r0]);
                for (uint64_t r = ra; r < rq; r += 4) bad |= quad_part(j, r, c, ce, &lanes[r - r0]);
                for (uint64_t r = rq; r < r1; r++) bad |= row_part(j, r, c, ce, &lanes[r - r0]);
            }
        } else {
            /* the columns before tile_c0 first: each row's columns are visited in order */
            for (uint64_t r = r0; r < r1 && j->tile_c0; r++) bad |= row_part(j, r, 0, j->tile_c0, &lanes[r - r0]);
            for (uint64_t r = r0; r < ra; r++) bad |= row_part(j, r, j->tile_c0, j->tile_c1, &lanes[r - r0]);
            for (uint64_t r = ra; r < rq; r += 4) bad |= quad_part(j, r, j->tile_c0, j->tile_c1, &lanes[r - r0]);
            for (uint64_t r = rq; r < r1; r++) bad |= row_part(j, r, j->tile_c0, j->tile_c1, &lanes[r - r0]);
        }
        if (j->tile_c1 < j->k)
            for (uint64_t r = r0; r < r1; r++) bad |= row_part(j, r, j->tile_c1, j->k, &lanes[r - r0]);
        if (bad) {
            uint64_t cnt = feather_count_nonfinite(j->dt, j->w + r0 * j->k * j->esz, (size_t)((r1 - r0) * j->k));
            atomic_fetch_add(&j->nonfinite, cnt);
        }
        if (j->stats) {
            for (uint64_t r = r0; r < r1; r++) {
                const feather_stat_lanes *l = &lanes[r - r0];
                row_stats *o = &j->rows[r];
                o->sum_sq = o->err_sq = 0;
                for (int i = 0; i < 8; i++) {
                    o->sum_sq += l->sum_sq[i];
                    o->err_sq += l->err_sq[i];
                }
                o->max_err = l->max_err;
            }
        }
    }
    if (j->nt) feather_stream_fence();
}

/* "tensor 'NAME': rule" (or just the rule when the tensor has no name). */
static feather_status fail_tensor(feather_error *err, feather_status code, const char *name,
                                  const char *fmt, ...) FEATHER_PRINTF(4, 5);
static feather_status fail_tensor(feather_error *err, feather_status code, const char *name,
                                  const char *fmt, ...) {
    char msg[FEATHER_ERROR_MAX], pre[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return feather_fail(err, code, "%s%s", feather_tensor_prefix(name, pre, sizeof pre), msg);
}

feather_status feather_quantize_with(feather_ctx *ctx, const feather_quant_options *opts,
                                     feather_dtype dtype, const void *w, uint64_t n, uint64_t k,
                                     const float *scales, int packed, uint8_t *q,
                                     feather_quant_stats *stats, feather_error *err) {
    return feather_quantize_band(ctx, opts, dtype, w, n, k, n, scales, packed, q, stats, err);
}

feather_status feather_quantize_band(feather_ctx *ctx, const feather_quant_options *opts, feather_dtype dtype,
                                     const void *w, uint64_t n, uint64_t k, uint64_t ldn, const float *scales,
                                     int packed, uint8_t *q, feather_quant_stats *stats, feather_error *err) {
    if (!opts) return feather_fail(err, FEATHER_E_ARG, "quantize: no options given");
    const char *name = opts->name;
#define FAIL(code, ...) fail_tensor(err, code, name, __VA_ARGS__)
    if (!feather_is_float(dtype))
        return FAIL(FEATHER_E_ARG, "cannot quantise dtype %s (F16, BF16 or F32 expected)",
                    feather_dtype_name(dtype));
    if (opts->format != FEATHER_FP8_E5M2 && opts->format != FEATHER_FP8_E4M3FN)
        return FAIL(FEATHER_E_ARG, "unknown fp8 format %d", (int)opts->format);
    uint64_t nk;
    if (!feather_mul_ok(n, k, &nk) || nk > SIZE_MAX / 4)
        return FAIL(FEATHER_E_ARG, "shape (%llu, %llu) is too large", (unsigned long long)n,
                    (unsigned long long)k);
    if (packed && k % 16)
        return FAIL(FEATHER_E_ARG, "K = %llu is not a multiple of 16, cannot prepack",
                    (unsigned long long)k);
    uint64_t nscales = 1, group = k;
    switch (opts->mode) {
    case FEATHER_SCALE_NONE:
    case FEATHER_SCALE_ABSMAX:
    case FEATHER_SCALE_TENSOR: break;
    case FEATHER_SCALE_CHANNEL: nscales = n; break;
    case FEATHER_SCALE_BLOCK:
        if (opts->group == 0 || opts->group % 16 || k % opts->group)
            return FAIL(FEATHER_E_ARG, "block size %u must be a multiple of 16 dividing K = %llu",
                        opts->group, (unsigned long long)k);
        group = opts->group;
        nscales = n * (k / group);
        break;
    default: return FAIL(FEATHER_E_ARG, "unknown scale mode %d", (int)opts->mode);
    }
    if (!scales && opts->mode != FEATHER_SCALE_NONE)
        return FAIL(FEATHER_E_ARG, "no scales given (scale mode %s needs them)",
                    opts->mode == FEATHER_SCALE_ABSMAX    ? "absmax"
                    : opts->mode == FEATHER_SCALE_TENSOR  ? "tensor"
                    : opts->mode == FEATHER_SCALE_CHANNEL ? "channel"
                                                          : "block");
    if (scales && nk) {
        for (uint64_t i = 0; i < nscales; i++) {
            float s = scales[i];
            if (!(s > 0.0f && s <= 3.4028234663852886e38f))
                return FAIL(FEATHER_E_ARG, "scale %llu (%g) is not a positive finite number",
                            (unsigned long long)i, (double)s);
        }
    }
    if (nk == 0) {
        if (stats) memset(stats, 0, sizeof *stats);
        return FEATHER_OK;
    }

    struct job j = {
        .dt = dtype, .fmt = opts->format, .esz = dtype == FEATHER_F32 ? 4 : 2, .w = w, .n = n,
        .k = k, .group = group ? group : 1, .ldn = ldn, .mode = opts->mode, .scales = scales,
        .packed = packed, .q = q,
    };
    feather_simd simd = feather_ctx_simd(ctx);
    j.cast = feather_cast_kernel(simd, dtype, opts->format, 0);
    j.cast_unit = feather_cast_kernel(simd, dtype, opts->format, 1);
    j.tile = feather_tile_kernel(simd, dtype, opts->format, 0);
    j.tile_unit = feather_tile_kernel(simd, dtype, opts->format, 1);
    /* 4-row kernels take 64 columns per step and one scale per run */
    j.tile_c1 = opts->mode == FEATHER_SCALE_BLOCK && group % 64 ? 0 : k / 64 * 64;
    /* Streaming stores need whole aligned lines and are only worth it for outputs that leave
     * the cache (a band's, as part of its whole weight); statistics read the codes straight
     * back, so they keep them cached. */
    uintptr_t mis = (uintptr_t)q % 64;
    j.nt = simd >= FEATHER_SIMD_AVX2 && !stats && ldn * k >= FEATHER_STREAM_MIN && mis % 16 == 0 &&
           (packed ? ldn % 4 == 0 : k % 64 == 0 && (mis == 0 || opts->mode != FEATHER_SCALE_BLOCK));
    if (j.nt && mis) {
        if (packed) {
            /* A packed line holds rows r … r+3 of one slab; with q at 16 (mod 64) the aligned
             * lines start at rows 3, 7, …: shift the grouping of rows by that phase. */
            j.phase = (64 - mis) / 16;
        } else {
            /* Every plain row has q's alignment (K % 64 == 0): start the 64-column steps at the
             * first aligned column (one scale per row here, so runs need not meet groups). */
            j.tile_c0 = 64 - mis;
            j.tile_c1 = j.tile_c0 + (k - j.tile_c0) / 64 * 64;
        }
    }
    if (stats) {
        j.stats = feather_stats_kernel(simd, dtype);
        j.rows = malloc(n * sizeof *j.rows);
        if (!j.rows) return FAIL(FEATHER_E_NOMEM, "out of memory for statistics");
    }
    atomic_init(&j.nonfinite, 0);
    atomic_init(&j.cancelled, 0);
    size_t strips = n <= j.phase + STRIP_ROWS ? 1 : (size_t)(1 + (n - j.phase - 1) / STRIP_ROWS);
    feather_parallel_for(ctx, strips, 1, strip_fn, &j);

    feather_status st = FEATHER_OK;
    uint64_t bad = atomic_load(&j.nonfinite);
    if (atomic_load(&j.cancelled)) {
        st = FAIL(FEATHER_E_CANCELLED, "cancelled");
    } else if (bad && !opts->allow_nonfinite) {
        char pre[320];
        st = feather_fail_nonfinite(err, feather_tensor_prefix(name, pre, sizeof pre), bad, "values");
    } else if (stats) {
        feather_quant_stats t = {.nonfinite = bad};
        for (uint64_t r = 0; r < n; r++) {
            t.sum_sq += j.rows[r].sum_sq;
            t.err_sq += j.rows[r].err_sq;
            if (j.rows[r].max_err > t.max_abs_err) t.max_abs_err = j.rows[r].max_err;
        }
        *stats = t;
    }
    free(j.rows);
    return st;
#undef FAIL
}

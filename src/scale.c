/* Scale search: chooses the f32 scales of a weight for the modes of quant.h.
 *
 * The arithmetic (candidates, rounding, error sums, tie-breaking) is defined in the comment of
 * include/feather/quant.h; a GPU port must follow that text. This file holds the option
 * parsing, the grid, the histogram search of tensor mode, the per-group search of channel and
 * block modes (threaded over rows), and the scalar kernels; scale_avx2.c and scale_avx512.c
 * hold the same kernels for wider registers. */
#include "scale_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- parse / format ---- */

#define SCALE_FORMS "none, absmax, tensor, channel or block:G (G a multiple of 16)"

feather_status feather_scale_parse(const char *s, feather_scale_mode *mode, unsigned *group,
                                   feather_error *err) {
    char q[96];
    if (!s) return feather_fail(err, FEATHER_E_ARG, "missing scale mode: expected " SCALE_FORMS);
    unsigned g = 0;
    feather_scale_mode m;
    if (!strcmp(s, "none")) m = FEATHER_SCALE_NONE;
    else if (!strcmp(s, "absmax")) m = FEATHER_SCALE_ABSMAX;
    else if (!strcmp(s, "tensor")) m = FEATHER_SCALE_TENSOR;
    else if (!strcmp(s, "channel")) m = FEATHER_SCALE_CHANNEL;
    else if (!strncmp(s, "block:", 6)) {
        const char *p = s + 6;
        unsigned long v = 0;
        if (*p < '0' || *p > '9') goto bad;
        for (; *p >= '0' && *p <= '9'; p++) {
            v = v * 10 + (unsigned long)(*p - '0');
            if (v > 0x10000000ul) goto bad; /* far above any row length; avoids overflow */
        }
        if (*p) goto bad;
        if (v < 16 || v % 16)
            return feather_fail(err, FEATHER_E_ARG,
                                "invalid scale mode '%s' (block size not a multiple of 16): "
                                "expected " SCALE_FORMS,
                                feather_quote(s, q, sizeof q));
        m = FEATHER_SCALE_BLOCK;
        g = (unsigned)v;
    } else goto bad;
    if (mode) *mode = m;
    if (group) *group = g;
    return FEATHER_OK;
bad:
    return feather_fail(err, FEATHER_E_ARG, "invalid scale mode '%s': expected " SCALE_FORMS,
                        feather_quote(s, q, sizeof q));
}

const char *feather_scale_format(feather_scale_mode mode, unsigned group, char *buf, size_t len) {
    const char *n = mode == FEATHER_SCALE_NONE      ? "none"
                    : mode == FEATHER_SCALE_ABSMAX  ? "absmax"
                    : mode == FEATHER_SCALE_TENSOR  ? "tensor"
                    : mode == FEATHER_SCALE_CHANNEL ? "channel"
                    : mode == FEATHER_SCALE_BLOCK   ? NULL
                                                    : "?";
    if (!buf || !len) return buf;
    if (n) snprintf(buf, len, "%s", n);
    else snprintf(buf, len, "block:%u", group);
    return buf;
}

/* ---------------------------------------------------------------- grid ---- */

unsigned feather_grid_size(unsigned grid) {
    if (grid == 0) return FEATHER_GRID_DEFAULT_SIZE;
    return grid > FEATHER_GRID_MAX ? FEATHER_GRID_MAX : grid;
}

void feather_grid_ratios(unsigned n, float *ratios) {
    /* r_j = 1 + j/n: one octave of grid positions (see quant.h for why [1, 2)). The division
     * is a correctly rounded IEEE operation on small integers, so every host computes the
     * same bits, unlike exp2f from a math library. */
    for (unsigned j = 0; j < n; j++) ratios[j] = (float)(n + j) / (float)n;
}

uint64_t feather_scale_count(const feather_quant_options *o, uint64_t n, uint64_t k) {
    if (!o) return 0;
    switch (o->mode) {
    case FEATHER_SCALE_NONE:
    case FEATHER_SCALE_ABSMAX:
    case FEATHER_SCALE_TENSOR: return 1;
    case FEATHER_SCALE_CHANNEL: return n;
    case FEATHER_SCALE_BLOCK: {
        uint64_t r;
        if (o->group < 16 || o->group % 16 || k % o->group) return 0;
        if (!feather_mul_ok(n, k / o->group, &r)) return 0;
        return r;
    }
    }
    return 0;
}

/* ---------------------------------------------------------------- scalar kernels ---- */

void feather_scale_prep_scalar(feather_dtype dt, const void *src, size_t len, float *a,
                               float *amax, float *amin, uint64_t *nonfinite) {
    float m = 0, mn = __builtin_inff();
    uint64_t nf = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t u;
        if (dt == FEATHER_F16) {
            float f = feather_f16_to_f32(feather_ld16(src, i) & 0x7fff);
            memcpy(&u, &f, 4);
        } else if (dt == FEATHER_BF16) {
            u = (uint32_t)(feather_ld16(src, i) & 0x7fff) << 16;
        } else {
            memcpy(&u, (const float *)src + i, 4);
            u &= 0x7fffffffu;
        }
        if (u >= 0x7f800000u) { /* Inf or NaN: contributes nothing */
            nf++;
            u = 0;
        }
        float f;
        memcpy(&f, &u, 4);
        a[i] = f;
        if (f > m) m = f;
        if (f > 0 && f < mn) mn = f;
    }
    for (size_t i = len; i % 16; i++) a[i] = 0;
    *amax = m;
    *amin = mn;
    *nonfinite += nf;
}

void feather_scale_cands_scalar(float s_abs, const float *r, unsigned n, float *s, float *inv) {
    for (unsigned j = 0; j < n; j++) {
        s[j] = s_abs * r[j];
        inv[j] = 1.0f / s[j];
    }
}

/* The reference: always the complete rounding (clamps only allow the SIMD kernels to skip
 * steps that cannot change the result). */
void feather_scale_errors_scalar(const float *a, const float *imp, size_t len, const float *s,
                                 const float *inv, unsigned n, scale_fmt f, int clamps,
                                 float *acc, float *tot) {
    (void)clamps;
    for (unsigned j = 0; j < n; j++) {
        float zero[16] = {0};
        float *l = acc ? acc + 16 * (size_t)j : zero;
        for (size_t k = 0; k < len; k++) {
            float v = feather_scale_round(a[k] * inv[j], f);
            float p = s[j] * v;
            float d = a[k] - p;
            float e = d * d;
            if (imp) e = e * imp[k];
            l[k % 16] = l[k % 16] + e;
        }
        if (tot) tot[j] = feather_scale_tree(l);
    }
}

/* Objective of each candidate over a histogram (quant.h step 5): double precision, bins in
 * increasing magnitude. */
void feather_scale_hist_scalar(const float *vals, const double *wt, size_t nb, const float *s,
                               const float *inv, unsigned n, scale_fmt f, double *obj) {
    for (unsigned j = 0; j < n; j++) obj[j] = 0;
    for (size_t i = 0; i < nb; i++) {
        float w = vals[i];
        double c = wt[i];
        for (unsigned j = 0; j < n; j++) {
            float v = feather_scale_round(w * inv[j], f);
            double d = (double)w - (double)s[j] * (double)v;
            obj[j] += c * (d * d);
        }
    }
}

scale_kernels feather_scale_kernels(feather_simd level) {
    scale_kernels k = {feather_scale_prep_scalar, feather_scale_cands_scalar,
                       feather_scale_errors_scalar, feather_scale_hist_scalar};
#if defined(__x86_64__) || defined(__i386__)
    if (level >= FEATHER_SIMD_AVX512) {
        k.prep = feather_scale_prep_avx512;
        k.cands = feather_scale_cands_avx512;
        k.errors = feather_scale_errors_avx512;
        k.hist = feather_scale_hist_avx512;
    } else if (level >= FEATHER_SIMD_AVX2) {
        k.prep = feather_scale_prep_avx2;
        k.cands = feather_scale_cands_avx2;
        k.errors = feather_scale_errors_avx2;
        k.hist = feather_scale_hist_avx2;
    }
#else
    (void)level;
#endif
    return k;
}

/* ---------------------------------------------------------------- common ---- */

static size_t dtype_size(feather_dtype dt) { return dt == FEATHER_F32 ? 4 : 2; }

/* Picks the candidate of least error; ties (and NaN totals) keep the earlier one. */
static unsigned argmin_f(const float *t, unsigned n) {
    unsigned b = 0;
    float bv = t[0];
    for (unsigned j = 1; j < n; j++) { /* branch-free: which candidate wins is unpredictable */
        int better = t[j] < bv;
        b = better ? j : b;
        bv = better ? t[j] : bv;
    }
    return b;
}

/* s_absmax of a group, or 0 when the group gets s = 1 (all zero, or too small to scale). */
static float absmax_scale(float amax, scale_fmt f) {
    if (!(amax > 0)) return 0;
    float s = amax / f.max;
    return s >= SCALE_MIN_SABS ? s : 0;
}

#define CHUNK 4096 /* elements per error-kernel call: a chunk of |w| stays in L1 */
#define LONG 65536 /* longer groups are converted chunk by chunk, twice (bounded buffers) */

/* Indices of the smallest and largest ratio: their inverse scales are the largest and the
 * smallest (1/(s·r) is monotonic in r under rounding), the extremes scale_clamps needs. */
static void ratio_extremes(const float *r, unsigned nr, unsigned *jhi, unsigned *jlo) {
    unsigned a = 0, b = 0;
    for (unsigned j = 1; j < nr; j++) {
        if (r[j] < r[a]) a = j;
        if (r[j] > r[b]) b = j;
    }
    *jhi = a;
    *jlo = b;
}

/* Error totals of the candidates s/inv over |w| in a[0 .. padded) into tot. */
static void group_errors(const scale_kernels *kn, scale_fmt f, const float *a, size_t padded,
                         const float *imp, const float *s, const float *inv, unsigned nr,
                         int clamps, float *acc, float *tot) {
    if (padded <= CHUNK) {
        kn->errors(a, imp, padded, s, inv, nr, f, clamps, NULL, tot);
        return;
    }
    memset(acc, 0, sizeof(float) * 16 * nr);
    for (size_t c = 0; c < padded; c += CHUNK) {
        size_t m = padded - c < CHUNK ? padded - c : CHUNK;
        kn->errors(a + c, imp ? imp + c : NULL, m, s, inv, nr, f, clamps, acc,
                   c + m == padded ? tot : NULL);
    }
}

/* Searches one group whose |w| is in a[0 .. len) (zero-padded to a multiple of 16). */
static float search_group(const scale_kernels *kn, scale_fmt f, const float *a, size_t len,
                          const float *imp, float amax, float amin, const float *r, unsigned nr,
                          unsigned jhi, unsigned jlo, float *s, float *inv, float *acc,
                          float *tot) {
    float sa = absmax_scale(amax, f);
    if (sa == 0) return 1.0f;
    if (nr == 1) return sa;
    kn->cands(sa, r, nr, s, inv);
    int clamps = scale_clamps(amax, amin, inv[jlo], inv[jhi], f);
    group_errors(kn, f, a, (len + 15) & ~(size_t)15, imp, s, inv, nr, clamps, acc, tot);
    return s[argmin_f(tot, nr)];
}

/* ---------------------------------------------------------------- per-row jobs ---- */

/* One job type serves channel and block modes (groups of a row), the two passes of f32 tensor
 * mode and absmax mode (a pass computing the maximum). Rows are independent, so the result
 * cannot depend on how rows are handed to threads. */
typedef struct row_job {
    scale_kernels kn;
    scale_fmt f;
    feather_dtype dt;
    const uint8_t *src;
    uint64_t k;          /* row length */
    uint64_t glen;       /* group length (k for channel and tensor) */
    const float *imp;    /* padded to a multiple of 16, or NULL */
    const float *r;
    unsigned nr, jhi, jlo; /* candidates; indices of the smallest and largest ratio */
    int pass;            /* 0: search groups, 1: amax only, 2: row totals of fixed candidates */
    float *scales;       /* pass 0 output, ngroups per row */
    const float *cs, *cinv; /* pass 2: the tensor's candidates */
    float *rowtot;       /* pass 2 output: nr per row */
    /* per worker scratch */
    uint8_t *scratch;
    size_t stride;
    float *wmax;         /* per worker amax (pass 1) */
    uint64_t *wnf;       /* per worker NaN/Inf counts */
    atomic_int cancelled;
} row_job;

/* A group longer than LONG (a long row in channel mode or F32 tensor mode): a first pass over
 * chunks finds amax/amin, a second converts each chunk again and adds its errors. Chunks start
 * at multiples of 16, so every element keeps its lane and the sums are those of the one-buffer
 * path. Returns the chosen scale (pass 0) or leaves the row totals in 'out' (pass 2). */
static float long_group(row_job *j, int w, const uint8_t *p, const float *imp, float *s,
                        float *inv, float *acc, float *tot, float *a, float *out) {
    size_t es = dtype_size(j->dt);
    float amax = 0, amin = __builtin_inff();
    for (uint64_t c = 0; c < j->glen; c += LONG) {
        size_t m = (size_t)(j->glen - c < LONG ? j->glen - c : LONG);
        float cm, cn;
        j->kn.prep(j->dt, p + c * es, m, a, &cm, &cn, &j->wnf[w]);
        amax = cm > amax ? cm : amax;
        amin = cn < amin ? cn : amin;
    }
    if (j->pass == 1) {
        if (amax > j->wmax[w]) j->wmax[w] = amax;
        return 0;
    }
    const float *cs = s, *ci = inv;
    if (j->pass == 0) {
        float sa = absmax_scale(amax, j->f);
        if (sa == 0) return 1.0f;
        if (j->nr == 1) return sa;
        j->kn.cands(sa, j->r, j->nr, s, inv);
    } else {
        cs = j->cs;
        ci = j->cinv;
        tot = out;
    }
    int clamps = scale_clamps(amax, amin, ci[j->jlo], ci[j->jhi], j->f);
    memset(acc, 0, sizeof(float) * 16 * j->nr);
    for (uint64_t c = 0; c < j->glen; c += LONG) {
        size_t m = (size_t)(j->glen - c < LONG ? j->glen - c : LONG), padded = (m + 15) & ~(size_t)15;
        float cm, cn;
        uint64_t nf = 0; /* already counted */
        j->kn.prep(j->dt, p + c * es, m, a, &cm, &cn, &nf);
        for (size_t q = 0; q < padded; q += CHUNK) {
            size_t l = padded - q < CHUNK ? padded - q : CHUNK;
            int last = c + m == j->glen && q + l == padded;
            j->kn.errors(a + q, imp ? imp + c + q : NULL, l, cs, ci, j->nr, j->f, clamps, acc,
                         last ? tot : NULL);
        }
    }
    return j->pass == 0 ? s[argmin_f(tot, j->nr)] : 0;
}

static void row_worker(void *arg, size_t b, size_t e, int w) {
    row_job *j = arg;
    /* scratch: s, inv, tot (each rounded up to 16 floats), acc (16 per candidate), |w| */
    size_t n16 = (j->nr + 15) & ~(size_t)15;
    float *s = (float *)(j->scratch + (size_t)w * j->stride), *inv = s + n16, *tot = inv + n16;
    float *acc = tot + n16, *a = acc + 16 * (size_t)j->nr;
    size_t es = dtype_size(j->dt);
    uint64_t ng = j->k / j->glen;
    /* work items are groups (row-major), so a few long rows still spread over threads */
    for (size_t gi = b; gi < e; gi++) {
        uint64_t row = gi / ng, g = gi % ng;
        if ((gi - b) % 64 == 0 && feather_cancelled()) {
            atomic_store(&j->cancelled, 1);
            return;
        }
        const uint8_t *p = j->src + (row * j->k + g * j->glen) * es;
        if (j->glen > LONG) {
            float sc = long_group(j, w, p, j->imp ? j->imp + g * j->glen : NULL, s, inv, acc, tot,
                                  a, j->rowtot ? j->rowtot + row * j->nr : NULL);
            if (j->pass == 0) j->scales[gi] = sc;
            continue;
        }
        float amax, amin;
        j->kn.prep(j->dt, p, j->glen, a, &amax, &amin, &j->wnf[w]);
        if (j->pass == 1) {
            if (amax > j->wmax[w]) j->wmax[w] = amax;
        } else if (j->pass == 2) {
            int clamps = scale_clamps(amax, amin, j->cinv[j->jlo], j->cinv[j->jhi], j->f);
            group_errors(&j->kn, j->f, a, (j->glen + 15) & ~(size_t)15, j->imp, j->cs, j->cinv,
                         j->nr, clamps, acc, j->rowtot + row * j->nr);
        } else {
            j->scales[gi] = search_group(&j->kn, j->f, a, j->glen,
                                         j->imp ? j->imp + g * j->glen : NULL, amax, amin, j->r,
                                         j->nr, j->jhi, j->jlo, s, inv, acc, tot);
        }
    }
}

/* ---------------------------------------------------------------- tensor histogram ---- */

/* Tensor mode of 16-bit weights: the objective depends on a weight only through its 15-bit
 * magnitude pattern, so one pass counts the patterns and each candidate then costs one sweep
 * over the (at most 32768) distinct magnitudes instead of a pass over the data.
 *
 * Counting: interleaved tables of 16-bit counters per thread (small enough to stay in L1/L2;
 * several tables shorten the store-to-load chains when nearby weights share a pattern:
 * two for F16, four for BF16, whose 7-bit mantissas make repeats ~8 times likelier — 15%
 * faster there, neutral for F16), emptied into 32-bit totals before any counter can wrap,
 * then into 64-bit ones. Counts are integers, so the sum over threads does not depend on how
 * the data was split. */
#define HIST_BINS 32768
#define HIST_UNIT 65536 /* elements per parallel work item */
#define HIST_FLUSH 65535 /* elements per table between flushes (the u16 limit) */

typedef struct hist_job {
    const uint16_t *p;
    uint64_t total, k;
    const uint32_t *impq; /* fixed-point importance (K), or NULL */
    unsigned ntab;        /* 16-bit tables in use: 2 or 4 */
    uint8_t *scratch;
    size_t stride;
    atomic_int cancelled;
} hist_job;

typedef struct hist_tables {
    uint64_t cnt[HIST_BINS];
    uint64_t wsum[HIST_BINS]; /* only with importance */
    uint32_t c32[HIST_BINS];
    uint16_t c16[4][HIST_BINS];
} hist_tables;

static void hist_flush16(hist_tables *t, unsigned ntab) {
    for (size_t i = 0; i < HIST_BINS; i++) {
        t->c32[i] += (uint32_t)t->c16[0][i] + t->c16[1][i];
        t->c16[0][i] = 0;
        t->c16[1][i] = 0;
    }
    if (ntab == 4)
        for (size_t i = 0; i < HIST_BINS; i++) {
            t->c32[i] += (uint32_t)t->c16[2][i] + t->c16[3][i];
            t->c16[2][i] = 0;
            t->c16[3][i] = 0;
        }
}
static void hist_flush32(hist_tables *t) {
    for (size_t i = 0; i < HIST_BINS; i++) {
        t->cnt[i] += t->c32[i];
        t->c32[i] = 0;
    }
}

static void hist_worker(void *arg, size_t b, size_t e, int w) {
    hist_job *j = arg;
    hist_tables *t = (hist_tables *)(j->scratch + (size_t)w * j->stride);
    uint64_t lo = (uint64_t)b * HIST_UNIT, hi = (uint64_t)e * HIST_UNIT;
    if (hi > j->total) hi = j->total;
    const uint16_t *p = j->p;
    unsigned flushes = 0;
    for (uint64_t c = lo; c < hi;) {
        if (feather_cancelled()) {
            atomic_store(&j->cancelled, 1);
            return;
        }
        uint64_t span = (uint64_t)j->ntab * HIST_FLUSH; /* at most 65535 per table */
        uint64_t end = c + span < hi ? c + span : hi;
        if (j->impq) {
            uint64_t kk = c % j->k;
            for (uint64_t i = c; i < end; i++) {
                unsigned v = feather_ld16(p, i) & 0x7fff;
                t->cnt[v]++;
                t->wsum[v] += j->impq[kk];
                if (++kk == j->k) kk = 0;
            }
            c = end;
            continue;
        }
        uint64_t i = c;
        uint16_t *t0 = t->c16[0], *t1 = t->c16[1], *t2 = t->c16[2], *t3 = t->c16[3];
        if (j->ntab == 4)
            for (; i + 4 <= end; i += 4) {
                t0[feather_ld16(p, i) & 0x7fff]++;
                t1[feather_ld16(p, i + 1) & 0x7fff]++;
                t2[feather_ld16(p, i + 2) & 0x7fff]++;
                t3[feather_ld16(p, i + 3) & 0x7fff]++;
            }
        else
            for (; i + 2 <= end; i += 2) {
                t0[feather_ld16(p, i) & 0x7fff]++;
                t1[feather_ld16(p, i + 1) & 0x7fff]++;
            }
        /* fewer than ntab left: one more in each of the first tables, which therefore hold at
         * most floor(span/ntab) = 65535 (a short last window has room for the extra one) */
        for (unsigned q = 0; i < end; i++, q++) t->c16[q][feather_ld16(p, i) & 0x7fff]++;
        c = end;
        hist_flush16(t, j->ntab);
        /* c32 grows by at most 4·65535 per flush: 8192 flushes stay far below 2^32 */
        if (++flushes == 8192) {
            hist_flush32(t);
            flushes = 0;
        }
    }
    if (!j->impq) hist_flush32(t);
}

void feather_scale_impq(const float *imp, uint64_t k, uint32_t *out) {
    /* Fixed point keeps the per-bin sums integer, hence independent of summation order:
     * q[k] = floor(imp[k] / max_imp · 2^24 + 0.5), in double. */
    float mx = 0;
    for (uint64_t i = 0; i < k; i++)
        if (imp[i] > mx) mx = imp[i];
    for (uint64_t i = 0; i < k; i++)
        out[i] = mx > 0 ? (uint32_t)((double)imp[i] / (double)mx * 16777216.0 + 0.5) : 0;
}

feather_status feather_scale_hist_pick(const feather_quant_options *o, feather_dtype dt,
                                       const uint16_t *c16, const uint64_t *cnt,
                                       const uint64_t *wsum, const float *r, unsigned nr,
                                       const scale_kernels *kn, float *scale, double *obj,
                                       feather_error *err) {
    char pre[320];
    scale_fmt f = scale_fmt_of(o->format);
#define COUNT(i) (c16 ? (uint64_t)c16[i] : cnt[i])
    /* Patterns from the first non-finite one up are Inf/NaN. */
    unsigned inf = dt == FEATHER_F16 ? 0x7c00 : 0x7f80;
    uint64_t nf = 0;
    for (size_t i = inf; i < HIST_BINS; i++) nf += COUNT(i);
    if (nf && !o->allow_nonfinite)
        return feather_fail_nonfinite(err, feather_tensor_prefix(o->name, pre, sizeof pre), nf, "values");
    unsigned top = 0;
    for (unsigned i = inf; i-- > 1;)
        if (COUNT(i)) {
            top = i;
            break;
        }
    float amax = dt == FEATHER_F16 ? feather_f16_to_f32((uint16_t)top)
                                   : feather_bf16_to_f32((uint16_t)top);
    float sa = absmax_scale(amax, f);
    if (sa == 0) {
        *scale = 1.0f;
        if (obj)
            for (unsigned q = 0; q < nr; q++) obj[q] = 0;
        return FEATHER_OK;
    }
    float *vals = malloc(sizeof *vals * (top + 1));
    double *wt = malloc(sizeof *wt * (top + 1));
    if (!vals || !wt) {
        free(vals);
        free(wt);
        return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
    }
    size_t nb = 0;
    for (unsigned i = 1; i <= top; i++) {
        uint64_t c = wsum ? wsum[i] : COUNT(i);
        if (!c) continue;
        vals[nb] = dt == FEATHER_F16 ? feather_f16_to_f32((uint16_t)i)
                                     : feather_bf16_to_f32((uint16_t)i);
        wt[nb++] = (double)c;
    }
#undef COUNT
    float s[FEATHER_GRID_MAX], inv[FEATHER_GRID_MAX];
    double ob[FEATHER_GRID_MAX];
    kn->cands(sa, r, nr, s, inv);
    kn->hist(vals, wt, nb, s, inv, nr, f, ob);
    *scale = s[feather_scale_argmin_d(ob, nr)];
    if (obj) memcpy(obj, ob, sizeof(double) * nr);
    free(vals);
    free(wt);
    return FEATHER_OK;
}

static feather_status search_tensor_hist(feather_ctx *ctx, const feather_quant_options *o,
                                         feather_dtype dt, const uint16_t *p, uint64_t n,
                                         uint64_t k, const float *r, unsigned nr,
                                         const scale_kernels *kn, float *scale, double *obj,
                                         feather_error *err) {
    char pre[320];
    int nt = feather_ctx_threads(ctx);
    feather_status st = FEATHER_OK;
    uint32_t *impq = NULL;
    uint64_t total = n * k;
    if (o->importance) {
        impq = malloc(sizeof *impq * (size_t)k);
        if (!impq) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
        feather_scale_impq(o->importance, k, impq);
    }
    /* Small tensors (most LoRA factors) cannot overflow one 16-bit table: count into it
     * directly and skip the per-thread tables, their flushes and merges (same counts). */
    int small = !impq && total <= 65535;
    uint16_t *c16 = NULL;
    size_t stride = (sizeof(hist_tables) + 63) & ~(size_t)63;
    hist_job j = {.p = p, .total = total, .k = k, .impq = impq, .stride = stride,
                  .ntab = dt == FEATHER_BF16 ? 4 : 2};
    atomic_init(&j.cancelled, 0);
    if (small) {
        if (feather_cancelled()) {
            free(impq);
            return feather_fail(err, FEATHER_E_CANCELLED, "%scancelled",
                                feather_tensor_prefix(o->name, pre, sizeof pre));
        }
        c16 = calloc(HIST_BINS, sizeof *c16);
        if (!c16) {
            free(impq);
            return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
        }
        for (uint64_t i = 0; i < total; i++) c16[feather_ld16(p, i) & 0x7fff]++;
    } else {
        j.scratch = calloc((size_t)nt, stride);
        if (!j.scratch) {
            free(impq);
            return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
        }
        feather_parallel_for(ctx, (size_t)((total + HIST_UNIT - 1) / HIST_UNIT), 16, hist_worker,
                             &j);
        if (atomic_load(&j.cancelled)) {
            st = feather_fail(err, FEATHER_E_CANCELLED, "%scancelled",
                              feather_tensor_prefix(o->name, pre, sizeof pre));
            goto out;
        }
    }
    hist_tables *t0 = (hist_tables *)j.scratch;
    for (int w = 1; w < nt && !small; w++) {
        hist_tables *t = (hist_tables *)(j.scratch + (size_t)w * stride);
        for (size_t i = 0; i < HIST_BINS; i++) {
            t0->cnt[i] += t->cnt[i];
            if (impq) t0->wsum[i] += t->wsum[i];
        }
    }
    st = feather_scale_hist_pick(o, dt, small ? c16 : NULL, small ? NULL : t0->cnt,
                                 impq ? t0->wsum : NULL, r, nr, kn, scale, obj, err);
out:
    free(c16);
    free(j.scratch);
    free(impq);
    return st;
}

/* ---------------------------------------------------------------- driver ---- */

feather_status feather_scale_check_options(const feather_quant_options *o, feather_dtype dt, uint64_t n,
                                    uint64_t k, feather_error *err) {
    char pre[320], m[32];
    if (!o) return feather_fail(err, FEATHER_E_ARG, "missing quantisation options");
    feather_tensor_prefix(o->name, pre, sizeof pre);
    if (!feather_is_float(dt))
        return feather_fail(err, FEATHER_E_ARG, "%sdtype %s cannot be quantised (F16, BF16 or F32)",
                            pre, feather_dtype_name(dt));
    if (o->format != FEATHER_FP8_E5M2 && o->format != FEATHER_FP8_E4M3FN)
        return feather_fail(err, FEATHER_E_ARG, "%sunknown fp8 format %d", pre, (int)o->format);
    if (o->mode > FEATHER_SCALE_BLOCK)
        return feather_fail(err, FEATHER_E_ARG, "%sunknown scale mode %d", pre, (int)o->mode);
    if (o->grid > FEATHER_GRID_MAX)
        return feather_fail(err, FEATHER_E_ARG, "%sgrid of %u candidates exceeds the maximum %d",
                            pre, o->grid, FEATHER_GRID_MAX);
    uint64_t total;
    if (!feather_mul_ok(n, k, &total) || total > (UINT64_MAX >> 3))
        return feather_fail(err, FEATHER_E_ARG, "%sshape (%llu, %llu) is too large", pre,
                            (unsigned long long)n, (unsigned long long)k);
    if (o->mode == FEATHER_SCALE_BLOCK) {
        if (o->group < 16 || o->group % 16)
            return feather_fail(err, FEATHER_E_ARG,
                                "%sscale mode %s: the block size must be a multiple of 16", pre,
                                feather_scale_format(o->mode, o->group, m, sizeof m));
        if (k % o->group)
            return feather_fail(err, FEATHER_E_ARG,
                                "%sscale mode %s needs the row length %llu to be a multiple of %u",
                                pre, feather_scale_format(o->mode, o->group, m, sizeof m),
                                (unsigned long long)k, o->group);
    }
    if (o->importance && o->mode != FEATHER_SCALE_NONE && o->mode != FEATHER_SCALE_ABSMAX)
        for (uint64_t i = 0; i < k; i++) {
            float v = o->importance[i];
            if (!(v >= 0) || v > 3.4e38f)
                return feather_fail(err, FEATHER_E_ARG,
                                    "%simportance weight %llu is %g (must be finite and >= 0)",
                                    pre, (unsigned long long)i, (double)v);
        }
    return FEATHER_OK;
}

/* One pass of row_worker over the groups of w: 0 searches each group's scale into scales, 1
 * finds the largest magnitude (*amax), 2 adds each row's errors of the candidates cs/ci into
 * rowtot. NaN/Inf weights fail the pass unless the options allow them. */
static feather_status row_pass(feather_ctx *ctx, const feather_quant_options *o, feather_dtype dt, const void *w,
                               uint64_t n, uint64_t k, const float *r, unsigned nr, int pass, const float *cs,
                               const float *ci, float *scales, float *rowtot, float *amax, feather_error *err) {
    char pre[320];
    feather_tensor_prefix(o->name, pre, sizeof pre);
    int nt = feather_ctx_threads(ctx);
    feather_status st = FEATHER_OK;
    row_job j;
    memset(&j, 0, sizeof j);
    j.kn = feather_scale_kernels(feather_ctx_simd(ctx));
    j.f = scale_fmt_of(o->format);
    j.dt = dt;
    j.src = w;
    j.k = k;
    j.glen = o->mode == FEATHER_SCALE_BLOCK ? o->group : k;
    j.r = r;
    j.nr = nr;
    ratio_extremes(r, nr, &j.jhi, &j.jlo);
    j.pass = pass;
    j.scales = scales;
    j.cs = cs;
    j.cinv = ci;
    j.rowtot = rowtot;
    atomic_init(&j.cancelled, 0);
    size_t padded = (size_t)((j.glen < LONG ? j.glen + 15 : LONG) & ~(uint64_t)15);
    float *imp = NULL;
    if (o->importance && o->mode != FEATHER_SCALE_ABSMAX) {
        size_t kp = (size_t)((k + 15) & ~(uint64_t)15);
        imp = calloc(kp, sizeof *imp);
        if (!imp) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
        memcpy(imp, o->importance, sizeof *imp * (size_t)k);
        j.imp = imp;
    }
    j.stride = sizeof(float) * (3 * (((size_t)nr + 15) & ~(size_t)15) + 16 * (size_t)nr + padded);
    j.stride = (j.stride + 63) & ~(size_t)63;
    j.scratch = aligned_alloc(64, j.stride * (size_t)nt);
    j.wmax = calloc((size_t)nt, sizeof *j.wmax);
    j.wnf = calloc((size_t)nt, sizeof *j.wnf);
    if (!j.scratch || !j.wmax || !j.wnf) {
        st = feather_fail(err, FEATHER_E_NOMEM, "out of memory");
        goto out;
    }
    /* work items are groups; grain: about 64k elements */
    size_t ngroups = (size_t)(n * (k / j.glen));
    size_t grain = j.glen >= 65536 ? 1 : (size_t)(65536 / j.glen);
    feather_parallel_for(ctx, ngroups, grain, row_worker, &j);
    if (atomic_load(&j.cancelled)) {
        st = feather_fail(err, FEATHER_E_CANCELLED, "%scancelled", pre);
        goto out;
    }
    uint64_t nf = 0;
    float mx = 0;
    for (int i = 0; i < nt; i++) {
        nf += j.wnf[i];
        if (j.wmax[i] > mx) mx = j.wmax[i];
    }
    if (amax) *amax = mx;
    if (nf && !o->allow_nonfinite)
        st = feather_fail_nonfinite(err, pre, nf, "values");
out:
    free(imp);
    free(j.scratch);
    free(j.wmax);
    free(j.wnf);
    return st;
}

/* Tensor mode of f32 weights: there are too many distinct values for a histogram, so each row is
 * evaluated like a channel group (16-lane f32 sums) and the row totals are added in double in row
 * order. */
static unsigned pick_rows(const float *rowtot, uint64_t n, unsigned nr, double *ob) {
    for (unsigned q = 0; q < nr; q++) ob[q] = 0;
    for (uint64_t row = 0; row < n; row++)
        for (unsigned q = 0; q < nr; q++) ob[q] += (double)rowtot[row * nr + q];
    return feather_scale_argmin_d(ob, nr);
}

/* The candidates of a tensor (or absmax) scale with ratios r[nr] for a weight of largest
 * magnitude amax into cs and ci, returning nr; or 0 with *scale set where there is nothing to
 * search (absmax, a weight of zeros, one candidate). */
static unsigned tensor_cands(const scale_kernels *kn, const feather_quant_options *o, float amax, const float *r,
                             unsigned nr, float *cs, float *ci, float *scale) {
    const float sa = absmax_scale(amax, scale_fmt_of(o->format));
    if (o->mode == FEATHER_SCALE_ABSMAX || sa == 0 || nr == 1) {
        *scale = sa == 0 ? 1.0f : sa;
        return 0;
    }
    kn->cands(sa, r, nr, cs, ci);
    return nr;
}

unsigned feather_scale_tensor_cands(feather_simd simd, const feather_quant_options *o, float amax, float *cs,
                                    float *ci, float *scale) {
    const scale_kernels kn = feather_scale_kernels(simd);
    float r[FEATHER_GRID_MAX];
    const unsigned nr = feather_grid_size(o->grid);
    feather_grid_ratios(nr, r);
    return tensor_cands(&kn, o, amax, r, nr, cs, ci, scale);
}

feather_status feather_scale_tensor_part(feather_ctx *ctx, const feather_quant_options *o, const float *w,
                                         uint64_t n, uint64_t k, const float *cs, const float *ci, unsigned nr,
                                         float *amax, float *rowtot, feather_error *err) {
    float r[FEATHER_GRID_MAX];
    const unsigned ng = feather_grid_size(o->grid);
    feather_grid_ratios(ng, r);
    feather_quant_options t = *o;
    t.mode = FEATHER_SCALE_TENSOR;
    return row_pass(ctx, &t, FEATHER_F32, w, n, k, r, cs ? nr : ng, cs ? 2 : 1, cs, ci, NULL, rowtot, amax, err);
}

float feather_scale_tensor_pick(const float *cs, const float *rowtot, uint64_t n, unsigned nr) {
    double ob[FEATHER_GRID_MAX];
    return cs[pick_rows(rowtot, n, nr, ob)];
}

feather_status feather_scale_search_ratios(feather_ctx *ctx, const feather_quant_options *o,
                                           feather_dtype dt, const void *w, uint64_t n,
                                           uint64_t k, const float *r, unsigned nr,
                                           float *scales, double *obj, feather_error *err) {
    feather_status st = feather_scale_check_options(o, dt, n, k, err);
    if (st) return st;
    if (nr < 1 || nr > FEATHER_GRID_MAX)
        return feather_fail(err, FEATHER_E_ARG, "grid of %u candidates (1 to %d)", nr,
                            FEATHER_GRID_MAX);
    if (o->mode == FEATHER_SCALE_NONE || n == 0 || k == 0) {
        uint64_t c = feather_scale_count(o, n, k);
        for (uint64_t i = 0; i < c; i++) scales[i] = 1.0f;
        if (obj)
            for (unsigned q = 0; q < nr; q++) obj[q] = 0;
        return FEATHER_OK;
    }
    if (o->mode == FEATHER_SCALE_ABSMAX) nr = 1;
    scale_kernels kn = feather_scale_kernels(feather_ctx_simd(ctx));
    if (o->mode == FEATHER_SCALE_TENSOR && dt != FEATHER_F32)
        return search_tensor_hist(ctx, o, dt, w, n, k, r, nr, &kn, scales, obj, err);
    /* channel and block scales in one pass; absmax, and tensor mode of f32 weights, need the
     * maximum first */
    if (o->mode == FEATHER_SCALE_CHANNEL || o->mode == FEATHER_SCALE_BLOCK)
        return row_pass(ctx, o, dt, w, n, k, r, nr, 0, NULL, NULL, scales, NULL, NULL, err);
    float amax = 0;
    if ((st = row_pass(ctx, o, dt, w, n, k, r, nr, 1, NULL, NULL, NULL, NULL, &amax, err))) return st;
    float cs[FEATHER_GRID_MAX], ci[FEATHER_GRID_MAX];
    double ob[FEATHER_GRID_MAX];
    if (!tensor_cands(&kn, o, amax, r, nr, cs, ci, &scales[0])) {
        if (obj)
            for (unsigned q = 0; q < nr; q++) obj[q] = 0;
        return FEATHER_OK;
    }
    float *rowtot = malloc(sizeof *rowtot * (size_t)n * nr);
    if (!rowtot) return feather_fail(err, FEATHER_E_NOMEM, "out of memory");
    st = row_pass(ctx, o, dt, w, n, k, r, nr, 2, cs, ci, NULL, rowtot, NULL, err);
    if (!st) {
        scales[0] = cs[pick_rows(rowtot, n, nr, ob)];
        if (obj) memcpy(obj, ob, sizeof(double) * nr);
    }
    free(rowtot);
    return st;
}

feather_status feather_scale_search(feather_ctx *ctx, const feather_quant_options *o,
                                    feather_dtype dt, const void *w, uint64_t n, uint64_t k,
                                    float *scales, feather_error *err) {
    float r[FEATHER_GRID_MAX];
    if (!o) return feather_fail(err, FEATHER_E_ARG, "missing quantisation options");
    if (o->grid > FEATHER_GRID_MAX) return feather_scale_check_options(o, dt, n, k, err);
    unsigned nr = feather_grid_size(o->grid);
    feather_grid_ratios(nr, r);
    return feather_scale_search_ratios(ctx, o, dt, w, n, k, r, nr, scales, NULL, err);
}

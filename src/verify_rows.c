/* The verifier's fused per-row work (verify_rows.h): scalar kernels, the SIMD dispatch and the
 * row-block driver that feeds the kernels chunk by chunk. */
#include "verify_rows.h"
#include "feather/fp8.h"

#include <math.h>

/* ---- scalar kernels: the definition the SIMD kernels reproduce ---- */
static unsigned prep_scalar(const void *w, feather_dtype dt, const uint8_t *q, size_t qstride, feather_fp8 fmt,
                            const float *svec, unsigned nv, float *wf, float *df, float *sums) {
    const uint8_t bad_mask = fmt == FEATHER_FP8_E5M2 ? 0x7c : 0x7f;
    unsigned bad = 0;
    for (unsigned v = 0; v < nv; v++)
        for (unsigned j = 0; j < VROWS_L; j++) {
            const size_t i = (size_t)v * VROWS_L + j;
            const uint8_t c = q[v * qstride + j];
            const float w0 = feather_load_f32(dt, w, i), d0 = feather_fp8_to_f32(c, fmt) * svec[v];
            /* a NaN/Inf original counts as 0 in the sums, and as its mapped value in products */
            const int fin = fabsf(w0) < INFINITY;
            const float x = fin ? w0 : 0.0f, d = fin ? d0 : 0.0f, e = x - d;
            bad += (c & bad_mask) == bad_mask;
            sums[VS_NF * VROWS_L + j] += (float)!fin;
            sums[VS_WW * VROWS_L + j] = fmaf(x, x, sums[VS_WW * VROWS_L + j]);
            sums[VS_EE * VROWS_L + j] = fmaf(e, e, sums[VS_EE * VROWS_L + j]);
            sums[VS_WD * VROWS_L + j] = fmaf(x, d, sums[VS_WD * VROWS_L + j]);
            sums[VS_DD * VROWS_L + j] = fmaf(d, d, sums[VS_DD * VROWS_L + j]);
            const float ae = fabsf(e), m = sums[VS_MAX * VROWS_L + j];
            sums[VS_MAX * VROWS_L + j] = ae > m ? ae : m; /* a NaN error leaves the maximum (as maxps) */
            wf[i] = fin ? w0 : d0;
            if (df) df[i] = d0;
        }
    return bad;
}

static void mul_scalar(const float *a, size_t lda, unsigned m, const float *w, size_t ldw, unsigned rows,
                       unsigned len, float *acc, size_t ldacc) {
    for (unsigned r = 0; r < rows; r++)
        for (unsigned t = 0; t < m; t++) {
            float *o = acc + (r * ldacc + t) * VROWS_L;
            const float *ar = a + t * lda, *wr = w + r * ldw;
            for (unsigned v = 0; v < len; v += VROWS_L)
                for (unsigned j = 0; j < VROWS_L; j++) o[j] = fmaf(ar[v + j], wr[v + j], o[j]);
        }
}

static uint64_t bad_codes_scalar(const uint8_t *q, uint64_t n, feather_fp8 fmt) {
    const uint8_t mask = fmt == FEATHER_FP8_E5M2 ? 0x7c : 0x7f;
    uint64_t c = 0;
    for (uint64_t i = 0; i < n; i++) c += (q[i] & mask) == mask;
    return c;
}

void feather_vrows_kernels(feather_simd level, vrows_kernels *k) {
    k->prep = prep_scalar;
    k->mul = mul_scalar;
    k->bad_codes = bad_codes_scalar;
    if (level == FEATHER_SIMD_AVX512) feather_vrows_kernels_avx512(k);
    else if (level == FEATHER_SIMD_AVX2) feather_vrows_kernels_avx2(k);
}

/* ---- row-block driver ---- */
#define ROUND16(x) (((x) + 15) & ~(size_t)15) /* keeps every scratch part 64-byte aligned */

size_t feather_vrows_scratch(const vrows_weight *w) {
    const size_t chunk = (size_t)VROWS_RB * VROWS_KC, acc = ROUND16((size_t)VROWS_RB * w->m * VROWS_L);
    return chunk * (w->ydeq ? 2 : 1) + acc * (w->ydeq ? 2 : 1) + (size_t)VROWS_RB * VS_COUNT * VROWS_L +
           VROWS_KC / VROWS_L + 2 * VROWS_L;
}

static size_t dtype_size(feather_dtype dt) { return dt == FEATHER_F32 ? 4 : 2; }

uint64_t feather_vrows_block(const vrows_kernels *kn, const vrows_weight *w, uint64_t b, float *scratch) {
    const uint64_t n = w->n, k = w->k, m = w->m, n0 = b * VROWS_RB;
    const unsigned rows = (unsigned)(n - n0 < VROWS_RB ? n - n0 : VROWS_RB);
    const size_t chunk = (size_t)VROWS_RB * VROWS_KC, accn = ROUND16((size_t)VROWS_RB * m * VROWS_L);
    float *wf = scratch, *df = w->ydeq ? wf + chunk : NULL;
    float *acc = wf + chunk * (w->ydeq ? 2 : 1), *acc2 = w->ydeq ? acc + accn : NULL;
    float *sums = acc + accn * (w->ydeq ? 2 : 1), *svec = sums + (size_t)VROWS_RB * VS_COUNT * VROWS_L;
    float *tw = svec + VROWS_KC / VROWS_L; /* a zero-padded last vector of a row */
    uint8_t tq[VROWS_L];
    memset(acc, 0, accn * (w->ydeq ? 2 : 1) * sizeof(float));
    memset(sums, 0, (size_t)VROWS_RB * VS_COUNT * VROWS_L * sizeof(float));
    const uint64_t glen = w->mode == FEATHER_SCALE_BLOCK && w->group ? w->group : k, gpr = k / glen;
    const size_t esz = dtype_size(w->wdt);
    uint64_t bad = 0;
    const uint64_t kp = (k + VROWS_L - 1) / VROWS_L * VROWS_L; /* K padded to whole vectors */
    for (uint64_t k0 = 0; k0 < kp; k0 += VROWS_KC) {
        const unsigned len = (unsigned)(kp - k0 < VROWS_KC ? kp - k0 : VROWS_KC), nv = len / VROWS_L;
        /* vectors wholly inside K; the last one of the last chunk may be partial */
        const unsigned nfull = k0 + len <= k ? nv : (unsigned)((k - k0) / VROWS_L);
        /* The next chunk's codes are asked for now: a packed weight's codes for a block lie
         * 16·N bytes apart, a pattern the hardware prefetchers do not follow (rows are read in
         * order, which they do). */
        if (k0 + VROWS_KC < k) {
            const uint64_t p0 = k0 + VROWS_KC, p1 = p0 + VROWS_KC < k ? p0 + VROWS_KC : k;
            for (unsigned r = 0; r < rows; r++) {
                const uint8_t *wr = (const uint8_t *)w->w + (n0 + r) * k * esz;
                for (uint64_t o = p0 * esz; o < p1 * esz; o += 64) __builtin_prefetch(wr + o);
            }
            if (w->packed)
            for (uint64_t kb = p0 / VROWS_L; kb < p1 / VROWS_L; kb++)
                for (uint64_t o = 0; o < (uint64_t)rows * VROWS_L; o += 64)
                    __builtin_prefetch(w->q + (kb * n + n0) * VROWS_L + o);
        }
        for (unsigned r = 0; r < rows; r++) {
            const uint64_t nn = n0 + r;
            if (w->mode == FEATHER_SCALE_BLOCK && w->scales) {
                /* a group is a whole number of vectors (G % 16 == 0) */
                const float *sr = w->scales + nn * gpr;
                uint64_t g = k0 / glen, left = glen - k0 % glen;
                for (unsigned v = 0; v < nv; v++) {
                    svec[v] = sr[g];
                    if ((left -= VROWS_L) == 0) { g++; left = glen; }
                }
            } else {
                const float s = !w->scales || w->mode == FEATHER_SCALE_NONE ? 1.0f
                                : w->mode == FEATHER_SCALE_CHANNEL          ? w->scales[nn]
                                                                            : w->scales[0];
                for (unsigned v = 0; v < nv; v++) svec[v] = s;
            }
            const uint8_t *wr = (const uint8_t *)w->w + (nn * k + k0) * esz;
            const uint8_t *qr = w->packed ? w->q + ((k0 / VROWS_L) * n + nn) * VROWS_L : w->q + nn * k + k0;
            const size_t qstride = w->packed ? (size_t)n * VROWS_L : VROWS_L;
            float *wfr = wf + (size_t)r * VROWS_KC, *dfr = df ? df + (size_t)r * VROWS_KC : NULL;
            float *sr = sums + (size_t)r * VS_COUNT * VROWS_L;
            bad += kn->prep(wr, w->wdt, qr, qstride, w->fmt, svec, nfull, wfr, dfr, sr);
            if (nfull < nv) { /* plain layout only: packed K is a multiple of 16 */
                const uint64_t base = k0 + (uint64_t)nfull * VROWS_L;
                for (unsigned j = 0; j < VROWS_L; j++) {
                    tw[j] = base + j < k ? feather_load_f32(w->wdt, w->w, nn * k + base + j) : 0.0f;
                    tq[j] = base + j < k ? w->q[nn * k + base + j] : 0;
                }
                bad += kn->prep(tw, FEATHER_F32, tq, VROWS_L, w->fmt, svec + nfull, 1, wfr + nfull * VROWS_L,
                                dfr ? dfr + nfull * VROWS_L : NULL, sr);
            }
        }
        /* a tile of activation rows at a time: its chunk and accumulators stay in L1 */
        for (uint64_t t0 = 0; t0 < m; t0 += VROWS_MT) {
            const float *at = w->a + vrows_a_index(m, t0, k0);
            const unsigned mt = (unsigned)(m - t0 < VROWS_MT ? m - t0 : VROWS_MT);
            kn->mul(at, VROWS_KC, mt, wf, VROWS_KC, rows, len, acc + t0 * VROWS_L, m);
            if (acc2) kn->mul(at, VROWS_KC, mt, df, VROWS_KC, rows, len, acc2 + t0 * VROWS_L, m);
        }
    }
    for (unsigned r = 0; r < rows; r++) {
        const uint64_t nn = n0 + r;
        for (uint64_t t = 0; t < m; t++) {
            w->yref[t * n + nn] = vrows_tree(acc + ((size_t)r * m + t) * VROWS_L);
            if (acc2) w->ydeq[t * n + nn] = vrows_tree(acc2 + ((size_t)r * m + t) * VROWS_L);
        }
        const float *sr = sums + (size_t)r * VS_COUNT * VROWS_L;
        double *o = w->rowsums + nn * VS_COUNT;
        for (int c = 0; c < VS_MAX; c++) {
            double s = 0;
            for (unsigned j = 0; j < VROWS_L; j++) s += sr[c * VROWS_L + j];
            o[c] = s;
        }
        float mx = 0;
        for (unsigned j = 0; j < VROWS_L; j++) mx = sr[VS_MAX * VROWS_L + j] > mx ? sr[VS_MAX * VROWS_L + j] : mx;
        o[VS_MAX] = mx;
    }
    return bad;
}

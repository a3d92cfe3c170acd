/* CPU matrix product with a prepacked e5m2 weight: panels of 64 output columns spread over
 * the context's threads, SIMD kernels for the inner loops (gemm_cpu_avx2.c,
 * gemm_cpu_avx512.c) and scalar ones here. Semantics: include/feather/gemm.h. */
#include "gemm_cpu.h"
#include "feather/fp8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- scalar kernels ---- */
static void a_convert_scalar(const uint16_t *a, uint64_t lda, unsigned rows, unsigned len, float *af) {
    for (unsigned r = 0; r < rows; r++)
        for (unsigned k = 0; k < len; k++) af[(size_t)r * len + k] = feather_f16_to_f32(a[r * lda + k]);
}

static void b_decode_scalar(const uint8_t *q, uint64_t n, uint64_t n0, unsigned ncols, uint64_t kb0,
                            unsigned nkb, float *bp) {
    for (unsigned kb = 0; kb < nkb; kb++) {
        const uint8_t *rec = q + ((kb0 + kb) * n + n0) * 16;
        for (unsigned i = 0; i < 16; i++) {
            float *row = bp + (size_t)(kb * 16 + i) * GEMM_CPU_NB;
            for (unsigned c = 0; c < GEMM_CPU_NB; c++)
                row[c] = c < ncols ? feather_f16_to_f32((uint16_t)(rec[c * 16 + i] << 8)) : 0.0f;
        }
    }
}

static void panel_mul_scalar(const float *af, unsigned rows, unsigned len, const float *bp, float *acc) {
    for (unsigned r = 0; r < rows; r++) {
        float *o = acc + (size_t)r * GEMM_CPU_NB;
        for (unsigned k = 0; k < len; k++) {
            float a = af[(size_t)r * len + k];
            const float *b = bp + (size_t)k * GEMM_CPU_NB;
            for (unsigned c = 0; c < GEMM_CPU_NB; c++) o[c] += a * b[c]; /* exact product */
        }
    }
}

static void flush_scalar(float *accg, unsigned rows, const float *s, float *acc) {
    for (unsigned i = 0; i < rows * GEMM_CPU_NB; i++) {
        acc[i] = fmaf(accg[i], s[i % GEMM_CPU_NB], acc[i]);
        accg[i] = 0.0f;
    }
}

/* ---- driver ---- */
typedef struct gemm_job {
    const feather_gemm_args *a;
    gemm_cpu_kernels kern;
    float *scratch;      /* per worker */
    size_t scratch_floats;
    uint64_t row_blocks; /* tasks are (panel, row block) pairs */
    atomic_int cancelled;
} gemm_job;

#define SCR_AF ((size_t)GEMM_CPU_RB * GEMM_CPU_KC)
#define SCR_BP ((size_t)GEMM_CPU_KC * GEMM_CPU_NB)
#define SCR_ACC ((size_t)GEMM_CPU_RB * GEMM_CPU_NB)
#define SCR_TOTAL (SCR_AF + SCR_BP + 2 * SCR_ACC + GEMM_CPU_NB)

static float out_bias(const feather_gemm_args *a, uint64_t col) {
    if (!a->bias) return 0.0f;
    return a->out_bf16 ? feather_bf16_to_f32(a->bias[col]) : feather_f16_to_f32(a->bias[col]);
}

/* One task: output columns [64·panel, +64) of rows [64·rb, +64). */
static void gemm_task(gemm_job *job, uint64_t panel, uint64_t rb, float *scr) {
    const feather_gemm_args *a = job->a;
    const gemm_cpu_kernels *kn = &job->kern;
    const uint64_t n = a->n, k = a->k, n0 = panel * GEMM_CPU_NB;
    const unsigned ncols = (unsigned)(n - n0 < GEMM_CPU_NB ? n - n0 : GEMM_CPU_NB);
    const int block = a->mode == FEATHER_SCALE_BLOCK;
    const uint64_t glen = block ? a->group : k; /* k per scale group */
    const uint64_t gpr = k / glen;
    float *af = scr, *bp = af + SCR_AF, *acc = bp + SCR_BP, *accg = acc + SCR_ACC, *sv = accg + SCR_ACC;
    uint16_t *y = a->y;

    {
        const uint64_t r0 = rb * GEMM_CPU_RB;
        const unsigned rows = (unsigned)(a->m - r0 < GEMM_CPU_RB ? a->m - r0 : GEMM_CPU_RB);
        memset(acc, 0, SCR_ACC * sizeof *acc);
        if (block) memset(accg, 0, SCR_ACC * sizeof *accg);
        for (uint64_t g0 = 0; g0 < k; g0 += glen) {
            for (uint64_t k0 = g0; k0 < g0 + glen; k0 += GEMM_CPU_KC) {
                unsigned len = (unsigned)(g0 + glen - k0 < GEMM_CPU_KC ? g0 + glen - k0 : GEMM_CPU_KC);
                kn->a_convert(a->a + r0 * k + k0, k, rows, len, af);
                kn->b_decode(a->q, n, n0, ncols, k0 / 16, len / 16, bp);
                kn->panel_mul(af, rows, len, bp, block ? accg : acc);
            }
            if (block) {
                for (unsigned c = 0; c < GEMM_CPU_NB; c++)
                    sv[c] = c < ncols ? a->scales[(n0 + c) * gpr + g0 / glen] : 0.0f;
                kn->flush(accg, rows, sv, acc);
            }
        }
        /* epilogue: tensor/channel scale, bias, one rounding */
        for (unsigned r = 0; r < rows; r++) {
            uint16_t *yr = y + (r0 + r) * n + n0;
            const float *ar = acc + (size_t)r * GEMM_CPU_NB;
            for (unsigned c = 0; c < ncols; c++) {
                float v = ar[c];
                if (a->mode == FEATHER_SCALE_ABSMAX || a->mode == FEATHER_SCALE_TENSOR) v = v * a->scales[0];
                else if (a->mode == FEATHER_SCALE_CHANNEL) v = v * a->scales[n0 + c];
                if (a->bias) v = v + out_bias(a, n0 + c);
                yr[c] = a->out_bf16 ? feather_f32_to_bf16(v) : feather_f32_to_f16(v);
            }
        }
    }
}

static void gemm_range(void *arg, size_t begin, size_t end, int worker) {
    gemm_job *job = arg;
    float *scr = job->scratch + (size_t)worker * job->scratch_floats;
    for (size_t t = begin; t < end; t++) {
        if (feather_cancelled()) {
            atomic_store(&job->cancelled, 1);
            return;
        }
        gemm_task(job, t / job->row_blocks, t % job->row_blocks, scr);
    }
}

feather_status feather_gemm_cpu(feather_ctx *ctx, const feather_gemm_args *a, feather_error *err) {
    gemm_job job;
    job.a = a;
    job.kern.a_convert = a_convert_scalar;
    job.kern.b_decode = b_decode_scalar;
    job.kern.panel_mul = panel_mul_scalar;
    job.kern.flush = flush_scalar;
    switch (feather_ctx_simd(ctx)) {
    case FEATHER_SIMD_AVX512: feather_gemm_cpu_kernels_avx512(&job.kern); break;
    case FEATHER_SIMD_AVX2: feather_gemm_cpu_kernels_avx2(&job.kern); break;
    default: break;
    }
    if (a->m == 0) return FEATHER_OK;
    const int workers = feather_ctx_threads(ctx);
    job.scratch_floats = (SCR_TOTAL + 15) & ~(size_t)15; /* 64-byte apart */
    job.scratch = aligned_alloc(64, (size_t)workers * job.scratch_floats * sizeof(float));
    if (!job.scratch)
        return feather_fail(err, FEATHER_E_NOMEM, "matrix product: no memory for %d worker buffers", workers);
    const uint64_t panels = (a->n + GEMM_CPU_NB - 1) / GEMM_CPU_NB;
    job.row_blocks = (a->m + GEMM_CPU_RB - 1) / GEMM_CPU_RB;
    atomic_init(&job.cancelled, 0);
    feather_parallel_for(ctx, (size_t)(panels * job.row_blocks), 1, gemm_range, &job);
    free(job.scratch);
    if (atomic_load(&job.cancelled)) return feather_fail(err, FEATHER_E_CANCELLED, "matrix product interrupted");
    return FEATHER_OK;
}

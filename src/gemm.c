/* Matrix product entry point: the shape rule, dispatch to the CPU or GPU implementation
 * (gemm_cpu.c, gpu.c). */
#include "gemm_cpu.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int feather_gemm_supported(uint64_t n, uint64_t k, feather_scale_mode mode, unsigned group) {
    const uint64_t lim = 0x7fffffff;
    if (n < 8 || n > lim || n % 8 || k < 16 || k > lim || k % 16) return 0;
    if (mode == FEATHER_SCALE_BLOCK && (group < 16 || group % 16 || k % group)) return 0;
    return mode >= FEATHER_SCALE_NONE && mode <= FEATHER_SCALE_BLOCK;
}

feather_status feather_gemm_check(const feather_gemm_args *a, feather_error *err) {
    if (!a) return feather_fail(err, FEATHER_E_ARG, "matrix product: no arguments");
    if (a->mode < FEATHER_SCALE_NONE || a->mode > FEATHER_SCALE_BLOCK)
        return feather_fail(err, FEATHER_E_ARG, "matrix product: unknown scale mode %d", (int)a->mode);
    if (a->n < 8 || a->n % 8 || a->n > 0x7fffffff)
        return feather_fail(err, FEATHER_E_ARG,
                            "matrix product: N = %llu must be a positive multiple of 8 below 2^31",
                            (unsigned long long)a->n);
    if (a->k < 16 || a->k % 16 || a->k > 0x7fffffff)
        return feather_fail(err, FEATHER_E_ARG,
                            "matrix product: K = %llu must be a positive multiple of 16 below 2^31",
                            (unsigned long long)a->k);
    if (a->m > 0x7fffffff)
        return feather_fail(err, FEATHER_E_ARG, "matrix product: M = %llu must be below 2^31",
                            (unsigned long long)a->m);
    if (a->mode == FEATHER_SCALE_BLOCK && (a->group < 16 || a->group % 16 || a->k % a->group))
        return feather_fail(err, FEATHER_E_ARG,
                            "matrix product: block group %u must be a multiple of 16 dividing K = %llu",
                            a->group, (unsigned long long)a->k);
    if (a->m && (!a->a || !a->q || !a->y))
        return feather_fail(err, FEATHER_E_ARG, "matrix product: A, Q and Y must not be NULL");
    if (a->mode != FEATHER_SCALE_NONE && !a->scales)
        return feather_fail(err, FEATHER_E_ARG, "matrix product: scale mode needs scales");
    return FEATHER_OK;
}

int feather_block_scales_rescalable(const float *s, uint64_t count) {
    float lo = INFINITY, hi = 0.0f;
    for (uint64_t i = 0; i < count; i++) {
        const float v = fabsf(s[i]);
        if (!(v >= 0x1p-126f && v <= 0x1p126f)) return 0; /* zero, subnormal, huge, Inf or NaN */
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    return count == 0 || hi <= lo * 0x1p40f;
}

feather_status feather_gemm(feather_ctx *ctx, feather_device dev, const feather_gemm_args *args,
                            feather_error *err) {
    feather_status st = feather_gemm_check(args, err);
    if (st != FEATHER_OK || args->m == 0) return st;
    if (dev == FEATHER_DEVICE_AUTO) dev = feather_gpu_available(NULL, 0) ? FEATHER_DEVICE_GPU : FEATHER_DEVICE_CPU;
    if (dev == FEATHER_DEVICE_GPU) return feather_gemm_gpu(args, err);
    return feather_gemm_cpu(ctx, args, err);
}

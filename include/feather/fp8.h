/*
 * Exact conversions between 16/32-bit floats and the two 8-bit float formats.
 *
 * Every cast rounds to nearest, ties to even, and saturates: a finite value past the largest
 * normal becomes ±max (57344 for e5m2, 448 for e4m3fn). Inf/NaN codes are never produced: the
 * codec maps NaN → +0 and ±Inf → ±max. Whether such a weight is acceptable is decided by the
 * caller (see feather_count_nonfinite and feather_quant_options.allow_nonfinite).
 *
 * Scaled casts are defined as q = fp8(f32(w) * inv_scale): one IEEE single-precision
 * multiply, no fused operations, then one rounding from f32. The GPU path computes the same.
 * f32 values are rounded directly to fp8, never through fp16 (that double rounding is wrong
 * for some inputs).
 */
#ifndef FEATHER_FP8_H
#define FEATHER_FP8_H

/* Declared before feather.h is included: feather.h ends by including quant.h, which needs it
 * (so including this header first works too). */
typedef enum feather_fp8 {
    FEATHER_FP8_E5M2 = 0,   /* 1-5-2, bias 15, the high byte of an fp16 */
    FEATHER_FP8_E4M3FN = 1  /* 1-4-3, bias 7, no Inf, 0x7F/0xFF NaN */
} feather_fp8;

#include "feather/feather.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FEATHER_E5M2_MAX 57344.0f
#define FEATHER_E4M3FN_MAX 448.0f

float feather_fp8_max(feather_fp8 f);
const char *feather_fp8_name(feather_fp8 f); /* "e5m2", "e4m3fn" */
feather_dtype feather_fp8_dtype(feather_fp8 f); /* F8_E5M2, F8_E4M3 */

/* Scalar conversions (reference semantics for every SIMD and GPU path). */
float feather_f16_to_f32(uint16_t h);
float feather_bf16_to_f32(uint16_t b);
uint16_t feather_f32_to_f16(float f);  /* RNE, for activations and outputs */
uint16_t feather_f32_to_bf16(float f); /* RNE */

uint8_t feather_f32_to_e5m2(float x);
uint8_t feather_f16_to_e5m2(uint16_t h);
uint8_t feather_bf16_to_e5m2(uint16_t b);
uint8_t feather_f32_to_e4m3fn(float x);
uint8_t feather_f16_to_e4m3fn(uint16_t h);
uint8_t feather_bf16_to_e4m3fn(uint16_t b);
float feather_e5m2_to_f32(uint8_t q);
float feather_e4m3fn_to_f32(uint8_t q);
uint8_t feather_f32_to_fp8(float x, feather_fp8 f);
float feather_fp8_to_f32(uint8_t q, feather_fp8 f);

/* Number of NaN and ±Inf values among n elements of an F16, BF16 or F32 array. */
uint64_t feather_count_nonfinite(feather_dtype dtype, const void *src, size_t n);

/* Bulk cast of n elements of src (F16, BF16 or F32): dst[i] = fp8(f32(src[i]) * inv_scale).
 * inv_scale == 1 is the plain cast. Uses the context's SIMD level (ctx may be NULL: the
 * detected one); single-threaded (callers split work). Any n, no alignment needed; every level
 * gives the bytes of the scalar functions above. FEATHER_E_ARG for another dtype or format. */
feather_status feather_fp8_cast(const feather_ctx *ctx, feather_dtype src_dtype, const void *src,
                                size_t n, float inv_scale, feather_fp8 fmt, uint8_t *dst);

/* Bulk decode: dst[i] = f32(q[i]) * scale. */
void feather_fp8_decode(const uint8_t *q, size_t n, float scale, feather_fp8 fmt, float *dst);

#ifdef __cplusplus
}
#endif
#endif

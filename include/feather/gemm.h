/*
 * Matrix product with a prepacked fp8 (e5m2) weight, on the CPU or a GPU.
 *
 *   Y[M,N] = A[M,K] · (s ⊙ Q)ᵀ  (+ bias[N])
 *
 * A is fp16, row-major. Q is the e5m2 weight of W[N,K] in the (K/16, N, 16) layout of quant.h
 * (packed[kb][n][i] = Q[n][16kb+i]); s are its scales in one of quant.h's modes. Products are
 * summed in f32. Block scales (block:G) are applied once per K-group inside the sum
 * (acc += s[n][g] · Σ_{k in g} a·q), tensor and channel scales to the finished sum. (Some GPU
 * kernels keep the sum in units of the current group's scale instead, acc ← acc · s[n][g-1] /
 * s[n][g] + Σ_{k in g} a·q, times the last group's scale at the end: the same sum, rounded
 * differently. They run only where every block scale's magnitude lies in [2^-126, 2^126] and
 * all are within 2^40 of each other, so that it cannot overflow.) Then the
 * bias (given in the output dtype) is added in f32 and the result rounded once, to nearest
 * even, to fp16 or bf16. Elements a kernel fails to write come back as NaN (the GPU path
 * fills its output with a NaN pattern before every launch).
 *
 * Shape rule (every device): M ≥ 1 (any value), N ≥ 8 and N % 8 == 0, K ≥ 16 and K % 16 == 0;
 * for block:G, G % 16 == 0 and K % G == 0; M, N, K < 2^31. Other shapes fail with
 * FEATHER_E_ARG before any work. feather_gemm_supported() answers the same question for a
 * weight alone (converters use it to decide which tensors to prepack).
 *
 * Devices: FEATHER_DEVICE_CPU runs the threaded SIMD implementation; FEATHER_DEVICE_GPU the
 * GPU kernels (FEATHER_E_UNSUPPORTED when this build has none or no usable GPU is present);
 * FEATHER_DEVICE_AUTO the GPU when one is usable, else the CPU. Programs resolve AUTO once with
 * feather_device_select() so they can tell the user about the fallback. (feather_device and its
 * functions are declared in feather.h: quantisation takes a device too.)
 */
#ifndef FEATHER_GEMM_H
#define FEATHER_GEMM_H

#include "feather/feather.h"
#include "feather/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct feather_gemm_args {
    uint64_t m, n, k;
    const uint16_t *a;        /* fp16 bits, M×K row-major */
    const uint8_t *q;         /* e5m2, (K/16, N, 16), N·K bytes */
    const float *scales;      /* none: NULL or ignored; absmax/tensor: 1; channel: N;
                                 block: N × K/G row-major */
    feather_scale_mode mode;
    unsigned group;           /* G for FEATHER_SCALE_BLOCK */
    const uint16_t *bias;     /* N values in the output dtype, or NULL */
    int out_bf16;             /* 1: bf16 output, 0: fp16 */
    void *y;                  /* M×N 16-bit values, row-major */
} feather_gemm_args;

/* 1 when a weight of shape (N, K) with this scale mode can be multiplied (the rule above). */
int feather_gemm_supported(uint64_t n, uint64_t k, feather_scale_mode mode, unsigned group);

/* Checks the arguments against the shape rule (FEATHER_E_ARG with the rule broken). */
feather_status feather_gemm_check(const feather_gemm_args *args, feather_error *err);

/* Computes the product on dev (host pointers everywhere; the GPU path copies in and out and
 * keeps its device buffers for the next call). ctx supplies the CPU threads and SIMD level and
 * may be NULL (one thread). */
feather_status feather_gemm(feather_ctx *ctx, feather_device dev, const feather_gemm_args *args,
                            feather_error *err);

/* Frees the device buffers the GPU path keeps between calls (no-op without a GPU backend). */
void feather_gpu_release(void);

#ifdef __cplusplus
}
#endif
#endif

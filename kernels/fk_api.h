/*
 * C interface of the GPU kernels and the few runtime calls the library needs. Built by the GPU
 * compiler (the .hip files here) and called from src/gpu.c and, through a shared library, from the
 * benchmark. Every function returns 0 or the runtime's error code (fk_error_string names it).
 * Pointers passed to fk_gemm are device pointers.
 */
#ifndef FK_API_H
#define FK_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { FK_SCALE_NONE = 0, FK_SCALE_TENSOR = 1, FK_SCALE_CHANNEL = 2, FK_SCALE_BLOCK = 3 };

/* Kernel variants (FK_VARIANT_AUTO picks by shape; the others exist for benchmarks). */
enum {
    FK_VARIANT_AUTO = 0,
    FK_VARIANT_SKINNY16 = 1,  /* M ≤ 16: weights streamed straight to registers, split K */
    FK_VARIANT_SKINNY32 = 2,  /* M ≤ 32 */
    FK_VARIANT_TILE64 = 3,    /* 64×128 tiles through shared memory */
    FK_VARIANT_TILE128 = 4,   /* 128×128 tiles */
    FK_VARIANT_TILE256 = 5,   /* 128×256 tiles (not with block scales) */
    FK_VARIANT_WGMMA = 6,     /* Hopper (sm_90a) wgmma, 128 weight rows × 128 rows of A */
    FK_VARIANT_WGMMA64 = 7,   /* the same with 64 rows of A */
    FK_VARIANT_WGMMA256 = 8,  /* the same with 256 rows of A (not with block scales) */
    FK_VARIANT_WS128 = 9,     /* Hopper wgmma, warp-specialised: TMA producer warp, persistent, 128 × 128 */
    FK_VARIANT_WS64 = 10,     /* the same with 64 rows of A */
    FK_VARIANT_COUNT
};

/* 0 when a GPU is usable; desc gets "name, arch, N SMs" or the reason there is none. */
int fk_init(char *desc, size_t len);
const char *fk_error_string(int code);

int fk_malloc(void **p, size_t bytes);
int fk_free(void *p);
int fk_to_device(void *dst, const void *src, size_t bytes);
int fk_to_host(void *dst, const void *src, size_t bytes);
int fk_memset(void *dst, int value, size_t bytes);
int fk_synchronize(void);

/* Bytes of workspace fk_gemm needs for this shape and variant (0 for none). The workspace must
 * be all zeros when first used; every fk_gemm leaves it all zeros again, whatever the shape. */
size_t fk_gemm_workspace(int64_t m, int64_t n, int64_t k, int kind, int group, int variant);

/* Y = A · (S ⊙ Q)ᵀ (+ bias), see include/feather/gemm.h. Asynchronous on stream (NULL: the
 * default stream); returns launch errors. FK error for shapes the variant cannot do:
 * the runtime's "invalid value". */
int fk_gemm(int64_t m, int64_t n, int64_t k, const void *a, const void *q, const float *scales,
            int kind, int group, const void *bias, int out_bf16, void *y, void *workspace,
            size_t workspace_bytes, int variant, void *stream);

/* The variant FK_VARIANT_AUTO chooses. */
int fk_gemm_pick(int64_t m, int64_t n, int64_t k, int kind, int group);

#ifdef __cplusplus
}
#endif
#endif

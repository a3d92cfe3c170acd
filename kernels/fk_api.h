/*
 * C interface of the GPU kernels and the few runtime calls the library needs. Built by the GPU
 * compiler (the .hip files here) and called from src/gpu.c and, through a shared library, from the
 * benchmark. Every function returns 0 or the runtime's error code (fk_error_string names it).
 * Pointers passed to fk_gemm and the fk_quant_* kernels are device pointers.
 */
#ifndef FK_API_H
#define FK_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* FK_SCALE_BLOCK_RS: block scales that the caller has checked to lie in [2^-126, 2^126] in
 * magnitude and within 2^40 of each other (feather_block_scales_rescalable); the kernels may
 * then keep their sums in units of the current group's scale (fk_ws_body, the skinny kernel's
 * rescaling forms in gemm_skinny.h, the tiled kernels above M = 128) instead of one sum per
 * group that is scaled and added as the group closes. */
enum { FK_SCALE_NONE = 0, FK_SCALE_TENSOR = 1, FK_SCALE_CHANNEL = 2, FK_SCALE_BLOCK = 3, FK_SCALE_BLOCK_RS = 4 };

/* Kernel variants (FK_VARIANT_AUTO picks by shape; the others exist for benchmarks). */
enum {
    FK_VARIANT_AUTO = 0,
    FK_VARIANT_SKINNY16 = 1,  /* M ≤ 16: weights streamed straight to registers, K split between warps */
    FK_VARIANT_SKINNY32 = 2,  /* M ≤ 32 */
    FK_VARIANT_TILE64 = 3,    /* 64×128 tiles through shared memory */
    FK_VARIANT_TILE128 = 4,   /* 128×128 tiles */
    FK_VARIANT_TILE256 = 5,   /* 128×256 tiles (block scales: FK_SCALE_BLOCK_RS only, else tile128's) */
    /* Hopper (sm_90a) wgmma from here on (fk_gemm_pick relies on the order) */
    FK_VARIANT_WS128 = 6,     /* warp-specialised: TMA producer warp, persistent, 128 weight rows × 128 rows of A */
    FK_VARIANT_WS64 = 7,      /* the same with 64 rows of A */
    FK_VARIANT_WS192 = 8,     /* ws128 with three consumer warpgroups: 192 weight rows × 128 (block scales: FK_SCALE_BLOCK_RS only) */
    FK_VARIANT_SK128 = 9,     /* ws128 with the last waves' tiles split between blocks (stream-K) */
    FK_VARIANT_SK64 = 10,     /* the same with 64 rows of A */
    FK_VARIANT_WS256 = 11,    /* ws128 with 256 rows of A and a producer warpgroup (block scales: FK_SCALE_BLOCK_RS only) */
    FK_VARIANT_SK256 = 12,    /* sk128 with 256 rows of A (the same) */
    FK_VARIANT_COUNT
};

/* A variant's name: the enum's, lower case (bench/gemm_bench.py reads them from this enum). */
static inline const char *fk_variant_name(int v) {
    static const char *const names[FK_VARIANT_COUNT] = {"auto",  "skinny16", "skinny32", "tile64", "tile128",
                                                        "tile256", "ws128",  "ws64",     "ws192",  "sk128",
                                                        "sk64",  "ws256",    "sk256"};
    return v >= 0 && v < FK_VARIANT_COUNT ? names[v] : "?";
}

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
 * default stream); returns launch errors. For shapes the variant cannot do, and for a and q
 * not 16-byte aligned, y not 4-byte aligned (kernels store pairs of columns; 16-byte alignment
 * is faster), scales or bias not naturally aligned: the runtime's "invalid value", nothing
 * launched. A wgmma variant asked for by number that cannot run on this GPU and driver (no
 * tensor map, registers or shared memory refused): "operation not supported", nothing
 * launched; FK_VARIANT_AUTO then runs a tiled kernel instead (its workspace covers both).
 * On compute capability 9.0 and newer a call may start while the kernel before it in the
 * stream finishes, and read q and the scales (not a, bias or y) before that kernel is done:
 * the kernel launched just before must not write q or scales. */
int fk_gemm(int64_t m, int64_t n, int64_t k, const void *a, const void *q, const float *scales,
            int kind, int group, const void *bias, int out_bf16, void *y, void *workspace,
            size_t workspace_bytes, int variant, void *stream);

/* Launches as if a block could have at most `bytes` of shared memory (0: the device's own
 * limit), as on a GPU with less of it than this one (tests: fk_shared_memory_floor()). */
void fk_limit_shared_memory(size_t bytes);
/* The least shared memory per block among the GPUs this build is for: 64 KiB for gfx11, 99 KiB
 * for NVIDIA (sm_86, sm_89, sm_120). Every variant but the wgmma ones runs within it. */
size_t fk_shared_memory_floor(void);

/* The variant FK_VARIANT_AUTO chooses. */
int fk_gemm_pick(int64_t m, int64_t n, int64_t k, int kind, int group);

/* ---- asynchronous work: page-locked host memory, streams, events, copies ----
 * Streams and events are opaque handles. Copies from or to page-locked memory (fk_host_alloc)
 * return at once and run in stream order; from or to other host memory they may block. */
int fk_host_alloc(void **p, size_t bytes);
int fk_host_free(void *p);
int fk_stream_create(void **stream);  /* does not synchronise with the default stream */
int fk_stream_destroy(void *stream);
int fk_stream_sync(void *stream);
int fk_event_create(void **event);    /* without timing */
int fk_event_destroy(void *event);
int fk_event_record(void *event, void *stream);
int fk_event_sync(void *event);
int fk_to_device_async(void *dst, const void *src, size_t bytes, void *stream);
int fk_to_host_async(void *dst, const void *src, size_t bytes, void *stream);
/* height rows of width bytes: from src (rows spitch apart) to dst (rows dpitch apart). */
int fk_to_host_2d_async(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                        size_t height, void *stream);
int fk_memset_async(void *dst, int value, size_t bytes, void *stream);
int fk_mem_info(size_t *free_bytes, size_t *total_bytes);

/* ---- quantisation (kernels/quant.hip; arithmetic in kernels/quant_hd.h) ----
 * A call works on `rows` consecutive rows of a weight (a chunk): every pointer is a device
 * pointer to that chunk's data, and per-row outputs are indexed from the chunk's first row.
 * The codes go to q as plain rows (rows × k) or, packed, as the chunk's own (k/16, rows, 16). */
enum { FK_DT_F16 = 0, FK_DT_BF16 = 1, FK_DT_F32 = 2 };

typedef struct fk_quant_params {
    const void *w;           /* rows × k weights of dtype, row-major */
    int dtype;               /* FK_DT_* */
    int e4m3;                /* 0: e5m2, 1: e4m3fn */
    int64_t rows, k;
    int64_t group;           /* columns sharing a scale: G for block:G, else k */
    int nr;                  /* candidates */
    const float *ratios;     /* nr candidate ratios (search) */
    const float *imp;        /* k importance weights, or NULL */
    const uint32_t *impq;    /* k fixed-point importance weights (histogram), or NULL */
    const float *cand_s, *cand_inv; /* nr fixed candidates (row totals) */
    float scale;             /* the one scale of fk_quant_cast / fk_quant_stats without scales */
    float *scales;           /* rows × k/group: written by the search, read by the statistics */
    float *totals;           /* rows × nr row totals */
    uint8_t *q;              /* codes */
    int packed;
    double *row_stats;       /* rows × 3: Σw², Σe², max|e| of each row */
    unsigned long long *nonfinite; /* NaN/Inf weights seen are added here */
    unsigned *amax_bits;     /* max |w| (NaN/Inf as 0) as f32 bits, max-ed in */
    unsigned long long *hist;   /* 32768 pattern counts, added to */
    unsigned long long *hist_w; /* 32768 sums of impq, added to (NULL: none) */
} fk_quant_params;

/* Channel/block search and cast, one group per 16 threads: scales and q (and nonfinite). */
int fk_quant_search_cast(const fk_quant_params *p, void *stream);
/* F32 tensor mode: the totals of the fixed candidates over each row (and nonfinite). */
int fk_quant_row_totals(const fk_quant_params *p, void *stream);
/* Cast with the one scale p->scale (and nonfinite). */
int fk_quant_cast(const fk_quant_params *p, void *stream);
/* Per-row statistics of the codes in q: scales per group from p->scales, or p->scale. */
int fk_quant_stats(const fk_quant_params *p, void *stream);
/* Max |w| into amax_bits (and nonfinite). */
int fk_quant_amax(const fk_quant_params *p, void *stream);
/* 15-bit magnitude pattern counts (and importance sums) of 16-bit weights. */
int fk_quant_hist(const fk_quant_params *p, void *stream);

#ifdef __cplusplus
}
#endif
#endif

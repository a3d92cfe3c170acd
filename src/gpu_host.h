/* Internal: what the GPU modules share on the host side (src/gpu.c): the one lock of the
 * device, and page-locked host memory that the GPU's copy engines can read and write directly.
 * Without a GPU backend the lock reports no GPU and host memory is plain malloc. */
#ifndef FEATHER_GPU_HOST_H
#define FEATHER_GPU_HOST_H

#include "internal.h"

/* Takes the GPU lock (every GPU module's device work runs under it) and returns 1 when a GPU
 * is usable, else 0 with the reason in desc; release with feather_gpu_unlock either way. */
int feather_gpu_lock(char *desc, size_t len);
void feather_gpu_unlock(void);

/* Host memory, page-locked when a GPU is usable (else, or when pinning fails, plain malloc).
 * feather_host_pinned says whether [p, p + len) lies inside one page-locked block: the GPU
 * quantiser then copies to or from it directly instead of through its staging buffers. */
void *feather_host_alloc(size_t bytes);
void feather_host_free(void *p);
int feather_host_pinned(const void *p, size_t len);

/* GPU builds: grows the device buffer *p (capacity *cap) to at least need bytes, with 25 %
 * slack for the next, slightly larger tensor; the old contents are not kept. Returns the
 * runtime's error code, or 0. */
int feather_gpu_grow(void **p, size_t *cap, size_t need);

/* feather_quantize_on(ctx, FEATHER_DEVICE_GPU, ...) with at most `copiers` of the context's
 * threads (besides the caller) copying between the caller's memory and the staging buffers
 * (0: all of them). A caller with threads of its own busy beside the call (the converter's
 * writer and hasher) leaves them cores this way. */
feather_status feather_gpu_quantize(feather_ctx *ctx, int copiers, const feather_quant_options *opts,
                                    feather_dtype dtype, const void *w, uint64_t n, uint64_t k, int packed,
                                    uint8_t *q, float *scales, feather_quant_stats *stats, feather_error *err);

/* Frees what the quantiser keeps on the device between calls (under the lock). */
void feather_gpu_quant_release_locked(void);
/* Largest chunk of rows the GPU quantiser streams, in bytes of input (0: the default, 8 MiB);
 * tests make it tiny to run many chunks through the pipeline, benchmarks compare sizes. */
void feather_gpu_quant_set_chunk(size_t bytes);
/* Seconds the GPU quantiser's calls spent copying between the caller's memory and staging,
 * waiting for the GPU, queueing GPU work, and in all; calls and chunks (for the benchmark). */
typedef struct feather_gpu_quant_prof {
    double copy_s, wait_s, enqueue_s, total_s;
    uint64_t calls, chunks;
} feather_gpu_quant_prof;
void feather_gpu_quant_profile(feather_gpu_quant_prof *out, int reset);

#endif

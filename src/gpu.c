/* Host side of the GPU backend: device discovery, the device lock, page-locked host memory and
 * the matrix product on host pointers (the quantiser's host side is gpu_quant.c).
 *
 * The kernels and the runtime calls are compiled by the GPU compiler (kernels/) and reached
 * through the C interface of kernels/fk_api.h. Device memory is a small cache of grow-only
 * buffers (A, Q, scales, bias, Y, workspace) kept between calls, so verifying a checkpoint
 * layer after layer allocates once; feather_gpu_release() frees it. One mutex serialises the
 * GPU work of all threads (there is one device and one set of buffers). Without a GPU backend
 * (make GPU=none) every entry point reports that. */
#include "gemm_cpu.h"
#include "gpu_host.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef FEATHER_GPU
#include "../kernels/fk_api.h"

#include <pthread.h>

enum { BUF_A, BUF_Q, BUF_S, BUF_BIAS, BUF_Y, BUF_WS, BUF_COUNT };

static pthread_mutex_t gpu_mu = PTHREAD_MUTEX_INITIALIZER;
static int gpu_state; /* 0 not probed, 1 usable, -1 not usable */
static char gpu_desc[256];
static struct { void *p; size_t cap; } gpu_buf[BUF_COUNT];

static void probe_locked(void) {
    if (!gpu_state) gpu_state = fk_init(gpu_desc, sizeof gpu_desc) == 0 ? 1 : -1;
}

int feather_gpu_available(char *desc, size_t len) {
    pthread_mutex_lock(&gpu_mu);
    probe_locked();
    int ok = gpu_state == 1;
    if (desc && len) snprintf(desc, len, "%s", gpu_desc);
    pthread_mutex_unlock(&gpu_mu);
    return ok;
}

int feather_gpu_grow(void **p, size_t *cap, size_t need) {
    if (*p && *cap >= need) return 0;
    fk_free(*p);
    *p = NULL;
    *cap = 0;
    size_t c = need + need / 4; /* slack for the next, slightly larger tensor */
    int rc = fk_malloc(p, c);
    if (rc) *p = NULL;
    else *cap = c;
    return rc;
}

/* Makes buffer i hold at least need bytes; a new workspace starts zeroed (fk_gemm's rule). */
static int reserve(int i, size_t need) {
    size_t before = gpu_buf[i].cap;
    int rc = feather_gpu_grow(&gpu_buf[i].p, &gpu_buf[i].cap, need);
    if (rc || i != BUF_WS || gpu_buf[i].cap == before) return rc;
    return fk_memset(gpu_buf[i].p, 0, gpu_buf[i].cap);
}

static uint64_t scale_count(const feather_gemm_args *a) {
    switch (a->mode) {
    case FEATHER_SCALE_ABSMAX:
    case FEATHER_SCALE_TENSOR: return 1;
    case FEATHER_SCALE_CHANNEL: return a->n;
    case FEATHER_SCALE_BLOCK: return a->n * (a->k / a->group);
    default: return 0;
    }
}

static int scale_kind(feather_scale_mode m) {
    switch (m) {
    case FEATHER_SCALE_ABSMAX:
    case FEATHER_SCALE_TENSOR: return FK_SCALE_TENSOR;
    case FEATHER_SCALE_CHANNEL: return FK_SCALE_CHANNEL;
    case FEATHER_SCALE_BLOCK: return FK_SCALE_BLOCK;
    default: return FK_SCALE_NONE;
    }
}

static feather_status gemm_locked(const feather_gemm_args *a, feather_error *err) {
    const size_t sa = a->m * a->k * 2, sq = a->n * a->k, ss = scale_count(a) * sizeof(float),
                 sb = a->bias ? a->n * 2 : 0, sy = a->m * a->n * 2;
    /* block scales checked here let the kernels keep one sum in units of the current group */
    int kind = scale_kind(a->mode);
    if (kind == FK_SCALE_BLOCK && feather_block_scales_rescalable(a->scales, scale_count(a))) kind = FK_SCALE_BLOCK_RS;
    const int group = a->mode == FEATHER_SCALE_BLOCK ? (int)a->group : 0;
    const size_t sw = fk_gemm_workspace((int64_t)a->m, (int64_t)a->n, (int64_t)a->k, kind, group, FK_VARIANT_AUTO);
    const char *step = "device allocation";
    int rc = 0;
    const size_t sizes[BUF_COUNT] = {sa, sq, ss, sb, sy, sw};
    for (int i = 0; i < BUF_COUNT && !rc; i++) rc = reserve(i, sizes[i]);
    if (!rc) { step = "copy of A"; rc = fk_to_device(gpu_buf[BUF_A].p, a->a, sa); }
    if (!rc) { step = "copy of Q"; rc = fk_to_device(gpu_buf[BUF_Q].p, a->q, sq); }
    if (!rc && ss) { step = "copy of the scales"; rc = fk_to_device(gpu_buf[BUF_S].p, a->scales, ss); }
    if (!rc && sb) { step = "copy of the bias"; rc = fk_to_device(gpu_buf[BUF_BIAS].p, a->bias, sb); }
    /* NaN pattern (0xffff in fp16 and bf16): an element the kernel misses cannot pass. */
    if (!rc) { step = "output fill"; rc = fk_memset(gpu_buf[BUF_Y].p, 0xff, sy); }
    if (!rc) {
        step = "kernel launch";
        rc = fk_gemm((int64_t)a->m, (int64_t)a->n, (int64_t)a->k, gpu_buf[BUF_A].p, gpu_buf[BUF_Q].p,
                     ss ? gpu_buf[BUF_S].p : NULL, kind, group, sb ? gpu_buf[BUF_BIAS].p : NULL,
                     a->out_bf16, gpu_buf[BUF_Y].p, gpu_buf[BUF_WS].p, gpu_buf[BUF_WS].cap,
                     FK_VARIANT_AUTO, NULL);
    }
    if (!rc) { step = "kernel run or copy of Y"; rc = fk_to_host(a->y, gpu_buf[BUF_Y].p, sy); }
    if (rc)
        return feather_fail(err, FEATHER_E_UNSUPPORTED,
                            "GPU matrix product %llux%llux%llu: %s failed: %s", (unsigned long long)a->m,
                            (unsigned long long)a->n, (unsigned long long)a->k, step, fk_error_string(rc));
    return FEATHER_OK;
}

feather_status feather_gemm_gpu(const feather_gemm_args *a, feather_error *err) {
    pthread_mutex_lock(&gpu_mu);
    probe_locked();
    feather_status st = gpu_state == 1
                            ? gemm_locked(a, err)
                            : feather_fail(err, FEATHER_E_UNSUPPORTED, "device gpu: no usable GPU: %s", gpu_desc);
    pthread_mutex_unlock(&gpu_mu);
    return st;
}

void feather_gpu_release(void) {
    pthread_mutex_lock(&gpu_mu);
    for (int i = 0; i < BUF_COUNT; i++) {
        fk_free(gpu_buf[i].p);
        gpu_buf[i].p = NULL;
        gpu_buf[i].cap = 0;
    }
    if (gpu_state == 1) feather_gpu_quant_release_locked();
    pthread_mutex_unlock(&gpu_mu);
}

int feather_gpu_lock(char *desc, size_t len) {
    pthread_mutex_lock(&gpu_mu);
    probe_locked();
    if (desc && len) snprintf(desc, len, "%s", gpu_desc);
    return gpu_state == 1;
}

void feather_gpu_unlock(void) { pthread_mutex_unlock(&gpu_mu); }

/* Page-locked blocks handed out, so that feather_host_pinned can answer without asking the
 * runtime (whose pointer queries differ between vendors and versions). Few and long-lived:
 * a converter's two output slots. */
#define PINNED_MAX 64
static pthread_mutex_t pinned_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { void *p; size_t len; } pinned[PINNED_MAX];

void *feather_host_alloc(size_t bytes) {
    void *p = NULL;
    if (feather_gpu_available(NULL, 0)) {
        pthread_mutex_lock(&pinned_mu);
        int slot = -1;
        for (int i = 0; i < PINNED_MAX && slot < 0; i++)
            if (!pinned[i].p) slot = i;
        if (slot >= 0 && fk_host_alloc(&p, bytes) == 0) {
            pinned[slot].p = p;
            pinned[slot].len = bytes;
        } else {
            p = NULL;
        }
        pthread_mutex_unlock(&pinned_mu);
    }
    return p ? p : malloc(bytes ? bytes : 1);
}

void feather_host_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&pinned_mu);
    for (int i = 0; i < PINNED_MAX; i++)
        if (pinned[i].p == p) {
            fk_host_free(p);
            pinned[i].p = NULL;
            pthread_mutex_unlock(&pinned_mu);
            return;
        }
    pthread_mutex_unlock(&pinned_mu);
    free(p);
}

int feather_host_pinned(const void *p, size_t len) {
    const char *c = p;
    int yes = 0;
    pthread_mutex_lock(&pinned_mu);
    for (int i = 0; i < PINNED_MAX && !yes; i++) {
        const char *b = pinned[i].p;
        yes = b && c >= b && len <= pinned[i].len && (size_t)(c - b) <= pinned[i].len - len;
    }
    pthread_mutex_unlock(&pinned_mu);
    return yes;
}

#else /* no GPU backend in this build */

static const char no_gpu[] = "built without GPU support (make GPU=auto|cuda|hip)";

int feather_gpu_available(char *desc, size_t len) {
    if (desc && len) snprintf(desc, len, "%s", no_gpu);
    return 0;
}

feather_status feather_gemm_gpu(const feather_gemm_args *a, feather_error *err) {
    (void)a;
    return feather_fail(err, FEATHER_E_UNSUPPORTED, "device gpu: %s", no_gpu);
}

void feather_gpu_release(void) {}

int feather_gpu_lock(char *desc, size_t len) {
    if (desc && len) snprintf(desc, len, "%s", no_gpu);
    return 0;
}
void feather_gpu_unlock(void) {}
void *feather_host_alloc(size_t bytes) { return malloc(bytes ? bytes : 1); }
void feather_host_free(void *p) { free(p); }
int feather_host_pinned(const void *p, size_t len) {
    (void)p;
    (void)len;
    return 0;
}

#endif

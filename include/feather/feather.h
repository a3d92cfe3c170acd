/*
 * feather — convert fp16/bf16 safetensors checkpoints to prepacked fp8 and verify them.
 *
 * Public API, umbrella header. Conventions shared by every module:
 *   - Functions that can fail return a feather_status and fill an optional feather_error
 *     (pass NULL when the message is not wanted). The message is one line naming the file,
 *     the tensor if any, and the rule that was broken.
 *   - Nothing in the library prints, exits or installs signal handlers. A program that wants
 *     Ctrl-C to stop long work calls feather_cancel() from its handler; every long operation
 *     polls the flag and returns FEATHER_E_CANCELLED, cleaning up after itself.
 *   - Objects are explicit contexts (feather_ctx, feather_reader, feather_writer…) created
 *     and freed by the caller.
 */
#ifndef FEATHER_FEATHER_H
#define FEATHER_FEATHER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FEATHER_VERSION_MAJOR 0
#define FEATHER_VERSION_MINOR 1
#define FEATHER_VERSION_PATCH 0
#define FEATHER_VERSION_STRING "0.1.0"

/* Version of the library actually linked (may differ from the header's). */
const char *feather_version(void);

typedef enum feather_status {
    FEATHER_OK = 0,
    FEATHER_E_INVALID,     /* input breaks a format rule (bad header, bad shape, NaN weight…) */
    FEATHER_E_IO,          /* open/read/write/fsync/rename failed, disk full, permission */
    FEATHER_E_NOMEM,       /* allocation failed */
    FEATHER_E_ARG,         /* caller passed an invalid argument or option */
    FEATHER_E_EXISTS,      /* output exists and overwriting was not requested */
    FEATHER_E_UNSUPPORTED, /* valid request this build or machine cannot do (e.g. no GPU) */
    FEATHER_E_MISMATCH,    /* verification found a difference (hash, values, threshold) */
    FEATHER_E_CANCELLED,   /* feather_cancel() was called */
    FEATHER_E_NOTHING      /* the input has nothing to convert: every tensor is kept (exit status 2,
                              like invalid input; a batch may count it apart from failures) */
} feather_status;

#define FEATHER_ERROR_MAX 1024

typedef struct feather_error {
    feather_status code;
    char message[FEATHER_ERROR_MAX];
} feather_error;

/* Short name of a status ("invalid input", "I/O error", …). */
const char *feather_status_name(feather_status s);

/*
 * Exit status shared by the programs (documented in feather-convert(1), feather-verify(1)):
 *   0 success, 1 verification failed, 2 invalid input or I/O error, 64 usage error,
 *   130 interrupted.
 */
enum {
    FEATHER_EXIT_OK = 0,
    FEATHER_EXIT_VERIFY = 1,
    FEATHER_EXIT_INPUT = 2,
    FEATHER_EXIT_USAGE = 64,
    FEATHER_EXIT_INTERRUPTED = 130
};
int feather_exit_code(feather_status s);

/* Async-signal-safe: asks every running feather operation to stop (FEATHER_E_CANCELLED). */
void feather_cancel(void);
int feather_cancelled(void);
void feather_cancel_reset(void);

/* ---- dtypes: every dtype of the safetensors reference, in its declaration order ---- */
typedef enum feather_dtype {
    FEATHER_BOOL = 0,
    FEATHER_F4,
    FEATHER_F6_E2M3,
    FEATHER_F6_E3M2,
    FEATHER_U8,
    FEATHER_I8,
    FEATHER_F8_E5M2,
    FEATHER_F8_E4M3,
    FEATHER_F8_E8M0,
    FEATHER_F8_E4M3FNUZ,
    FEATHER_F8_E5M2FNUZ,
    FEATHER_I16,
    FEATHER_U16,
    FEATHER_F16,
    FEATHER_BF16,
    FEATHER_I32,
    FEATHER_U32,
    FEATHER_F32,
    FEATHER_C64,
    FEATHER_F64,
    FEATHER_I64,
    FEATHER_U64,
    FEATHER_DTYPE_COUNT
} feather_dtype;

const char *feather_dtype_name(feather_dtype d);               /* "F16", "F8_E5M2", … */
int feather_dtype_parse(const char *s, size_t len, feather_dtype *out); /* 0 ok, -1 unknown */
unsigned feather_dtype_bits(feather_dtype d);                  /* 4, 6, 8, 16, 32, 64 */

/* ---- execution context: thread pool and SIMD level ---- */
typedef struct feather_ctx feather_ctx;

/* threads = 0: one per core this process may run on (feather_cores). Returns NULL on
 * allocation failure. */
feather_ctx *feather_ctx_new(int threads);
void feather_ctx_free(feather_ctx *ctx);
int feather_ctx_threads(const feather_ctx *ctx);
/* The cores this process may run on (its CPU affinity, as nproc counts them). */
int feather_cores(void);

typedef enum feather_simd {
    FEATHER_SIMD_SCALAR = 0,
    FEATHER_SIMD_AVX2 = 1,   /* AVX2 + F16C + FMA */
    FEATHER_SIMD_AVX512 = 2  /* AVX-512 F/BW/VL */
} feather_simd;

/* Best level this CPU supports (FEATHER_SIMD=scalar|avx2|avx512 in the environment lowers it). */
feather_simd feather_simd_detect(void);
const char *feather_simd_name(feather_simd s);
/* Force a level on a context (tests compare every path). Levels above what the CPU has fail. */
feather_status feather_ctx_set_simd(feather_ctx *ctx, feather_simd s);
feather_simd feather_ctx_simd(const feather_ctx *ctx);

/* ---- devices: where the matrix product (gemm.h) and quantisation (quant.h) run ----
 * FEATHER_DEVICE_CPU: the threaded SIMD code; FEATHER_DEVICE_GPU: the GPU kernels
 * (FEATHER_E_UNSUPPORTED when this build has none or no usable GPU is present); AUTO: the GPU
 * when one is usable, else the CPU. Quantisation gives the same bytes on both. */
typedef enum feather_device {
    FEATHER_DEVICE_AUTO = 0,
    FEATHER_DEVICE_CPU,
    FEATHER_DEVICE_GPU
} feather_device;

/* Parses "auto", "cpu", "gpu". */
feather_status feather_device_parse(const char *s, feather_device *dev, feather_error *err);
const char *feather_device_name(feather_device d); /* "auto", "cpu", "gpu" */

/* 1 when this build has a GPU backend and a GPU it can use. desc (may be NULL) receives the
 * device ("NVIDIA H100 80GB HBM3, sm_90, 132 SMs") or why there is none ("built without GPU
 * support", "no CUDA device: ..."). The first call initialises the GPU runtime. */
int feather_gpu_available(char *desc, size_t len);

/* Resolves a request to CPU or GPU. AUTO without a usable GPU gives CPU and sets *fell_back
 * (may be NULL) to 1, with the reason in why; GPU without one fails with FEATHER_E_UNSUPPORTED.
 * Where a GPU was looked for and found, why (may be NULL) receives its description, as from
 * feather_gpu_available. */
feather_status feather_device_select(feather_device want, feather_device *got, int *fell_back,
                                     char *why, size_t len, feather_error *err);

#ifdef __cplusplus
}
#endif

#include "feather/safetensors.h"
#include "feather/fp8.h"
#include "feather/quant.h"
#include "feather/gemm.h"

#endif

/*
 * Verification of a converted checkpoint: integrity (header, metadata consistency, recorded
 * XXH3 of every tensor, no Inf/NaN fp8 codes, finite positive scales) and, given the original,
 * the error of every converted tensor in weight space and in output space, through the same
 * matmul the checkpoint is made for (feather_gemm, GPU or CPU).
 */
#ifndef FEATHER_VERIFY_H
#define FEATHER_VERIFY_H

#include "feather/feather.h"
#include "feather/gemm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct feather_verify_options {
    const char *reference;    /* original checkpoint, or NULL for integrity only */
    feather_device device;    /* where the matmul runs */
    uint64_t tokens;          /* M: rows of random activations (0 = 16) */
    uint64_t seed;            /* activations' seed */
    const char *activations;  /* safetensors file with one [M, K] tensor per layer, or NULL */
    double min_snr_db;        /* fail tensors under this SNR (NaN: no threshold) */
    double max_rel_err;       /* fail tensors over this relative error (NaN: no threshold) */
    void (*progress)(void *arg, uint64_t done, uint64_t total, const char *tensor);
    void *progress_arg;
} feather_verify_options;

void feather_verify_defaults(feather_verify_options *o);

typedef struct feather_verify_tensor {
    char name[512];
    int converted;            /* an fp8 weight with a scale */
    char dtype[16];           /* dtype in the converted file */
    uint64_t n, k;            /* for converted weights */
    uint64_t bytes;           /* bytes in the converted file (weight + scale) */
    uint64_t bytes_reference; /* bytes in the original */
    char problem[512];        /* integrity or reference problem; empty when sound */
    int measured;             /* the error figures below are set */
    double weight_rel_rms, weight_snr_db, weight_cos, weight_max_abs;
    uint64_t nonfinite;       /* the original's NaN/Inf values (a conversion that allowed them
                                 mapped them): left out of both spaces' error figures */
    int output_measured;
    double output_rel_err, output_snr_db, output_max_abs;
    int failed_threshold;
} feather_verify_tensor;

typedef struct feather_verify_report {
    char path[4096];
    char reference[4096];
    char file_problem[512];   /* a problem with the file itself (not a feather output, metadata
                                 that does not match, a reference it was not converted from):
                                 the first found, naming the file or shard; empty when none */
    size_t count;
    feather_verify_tensor *tensors; /* the tensors, in model (file) order, then those of the
                                       reference missing from the converted file */
    size_t problems;          /* tensors with a problem */
    size_t threshold_failures;
    uint64_t bytes_converted, bytes_reference;
    size_t measured;
    uint64_t nonfinite;       /* NaN/Inf values of the original left out, over every tensor */
    double snr_mean_db, snr_median_db, snr_worst_db; /* output SNR when measured, else weight */
    char device[160];         /* where the matmul ran */
    double seconds;
} feather_verify_report;

/* Runs the checks. Returns FEATHER_OK when every check passed, FEATHER_E_MISMATCH when the file
 * or some tensor failed (the report says which), another status when verification could not run
 * (unreadable file, bad options). *out is set whenever a report exists; free it with
 * feather_verify_report_free. */
feather_status feather_verify(feather_ctx *ctx, const char *converted, const feather_verify_options *o,
                              feather_verify_report **out, feather_error *err);
void feather_verify_report_free(feather_verify_report *r);

/* 1 when the file and every tensor passed (no problem, no threshold failed), else 0. */
int feather_report_ok(const feather_verify_report *r);

/* The report's tensors ordered worst first: problems, then lowest SNR. malloc'd array. */
const feather_verify_tensor **feather_report_sorted(const feather_verify_report *r);

/* Report renderings, as malloc'd NUL-terminated strings (NULL when out of memory). */
char *feather_report_json(const feather_verify_report *r);
char *feather_report_csv(const feather_verify_report *r);
char *feather_report_html(const feather_verify_report *r); /* self-contained, offline, with SVG */

#ifdef __cplusplus
}
#endif
#endif

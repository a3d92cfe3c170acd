/*
 * Conversion of a checkpoint: choosing the tensors (presets, name and shape rules,
 * --include/--exclude), quantising them and writing the result with self-describing
 * metadata (see feather(5)).
 */
#ifndef FEATHER_CONVERT_H
#define FEATHER_CONVERT_H

#include "feather/feather.h"
#include "feather/gemm.h"
#include "feather/quant.h"
#include "feather/safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Name and version of the file format written into every output (key feather.format). */
#define FEATHER_FORMAT_NAME "feather-fp8"
#define FEATHER_FORMAT_VERSION 1

typedef enum feather_layout {
    FEATHER_LAYOUT_PACKED = 0, /* F8_E5M2 [K/16, N, 16] for the feather kernel */
    FEATHER_LAYOUT_COMFY       /* plain [N, K] fp8 + ComfyUI per-layer quantisation metadata */
} feather_layout;

const char *feather_layout_name(feather_layout l);

/* ---- presets: model families whose fragile layers stay at full precision ---- */
typedef struct feather_preset {
    const char *name;        /* "flux", "qwen-image", … */
    const char *description;
    const char *const *detect_all; /* NULL-terminated POSIX EREs: the family is detected
                                      when each one matches some tensor name */
    const char *keep;        /* ERE over tensor names kept at full precision */
} feather_preset;

size_t feather_preset_count(void);
const feather_preset *feather_preset_at(size_t i);
const feather_preset *feather_preset_find(const char *name);

/* ---- the plan: what happens to every tensor ---- */
typedef enum feather_action {
    FEATHER_KEEP = 0,   /* copied byte for byte */
    FEATHER_CONVERT,    /* quantised from F16/BF16/F32 */
    FEATHER_REPACK,     /* already fp8 with the target format: layout changes, bytes don't */
    FEATHER_REQUANT,    /* fp8 of another format (e4m3) or other scales, or ComfyUI's NVFP4:
                           dequantised and quantised again */
    FEATHER_DROP,       /* consumed by another entry (an input scale or comfy_quant tensor) */
    FEATHER_DEQUANT     /* an fp8 weight not converted whose loader would run it as a plain weight,
                           ignoring its scale (the packed layout's; in the comfy layout one without
                           a ComfyUI tag): dequantised to BF16 */
} feather_action;

const char *feather_action_name(feather_action a);

typedef struct feather_plan_entry {
    const feather_tensor *tensor; /* input tensor */
    const char *name;             /* its name in the output: the input's, but "X.weight" for a
                                     compressed-tensors "X.weight_packed" converted or
                                     dequantised */
    feather_action action;
    char reason[160];
    uint64_t n, k;                 /* for converted and dequantised weights: (N, K) */
    const feather_tensor *scale;   /* for an fp8 weight: the input's scale tensor, if any; for
                                      an FP4 one its block scales */
    const feather_tensor *scale2;  /* for an NVFP4 weight: its tensor scale, else NULL */
    unsigned fp4;                  /* for an FP4 weight (two E2M1 codes a byte): values per block
                                      scale, 16 (NVFP4) or 32 (MXFP4); else 0 */
    uint64_t bytes_in, bytes_out;  /* bytes_out includes the scale tensor */
} feather_plan_entry;

typedef struct feather_convert_options {
    feather_quant_options quant;   /* format, scale mode, group, grid, allow_nonfinite */
    feather_layout layout;
    const char *preset;            /* NULL or "auto": detect; "none": no preset */
    const char *const *include;    /* ERE: convert even if the preset keeps it (the name must
                                      still end in .weight; shape and dtype rules apply;
                                      embedding tables and LoRA factors stay kept) */
    size_t ninclude;
    const char *const *exclude;    /* ERE: keep at full precision (wins over include) */
    size_t nexclude;
    feather_device device;         /* AUTO: see feather_convert_device; GPU: fails before
                                      anything is opened when no GPU is usable */
    int zstd_level;                /* for a ".zst" output; 0 = default */
    int zstd_threads;
    int overwrite;                 /* replace an existing output */
    const char *command_line;      /* recorded in metadata (feather.command) */
    int no_snr;                    /* skip the weight-error sums (about half the cast's time);
                                      the result's SNR fields are then NaN */
    /* Called from the converting thread after each tensor and every few MB. */
    void (*progress)(void *arg, uint64_t done, uint64_t total, const char *tensor);
    void *progress_arg;
} feather_convert_options;

/* Sensible defaults (e5m2, packed, the default scale mode, auto preset, auto device). */
void feather_convert_defaults(feather_convert_options *o);

typedef struct feather_plan feather_plan;

/* Builds the plan for an opened input: every tensor's action and the reason for it. Fails on
 * an unknown preset, an invalid regex or an invalid option combination; a plan that converts
 * nothing is made (so that it can be shown), and feather_plan_check refuses it. */
feather_status feather_plan_new(feather_plan **out, feather_reader *r,
                                const feather_convert_options *o, feather_error *err);
/* FEATHER_E_NOTHING, with one line naming the input (and saying so where it is a LoRA), when
 * the plan converts, repacks or requantises no tensor (feather_convert refuses such an input);
 * else FEATHER_OK. */
feather_status feather_plan_check(const feather_plan *p, feather_error *err);
void feather_plan_free(feather_plan *p);
size_t feather_plan_count(const feather_plan *p);
const feather_plan_entry *feather_plan_at(const feather_plan *p, size_t i);
/* Preset in use ("none" when no family was detected or chosen). */
const char *feather_plan_preset(const feather_plan *p);
uint64_t feather_plan_bytes_in(const feather_plan *p);
uint64_t feather_plan_bytes_out(const feather_plan *p);

/* ---- conversion ---- */
#define FEATHER_MAX_WARNINGS 8

typedef struct feather_convert_result {
    int skipped;                   /* output already up to date for this input and options */
    int used_gpu;
    char gpu_fallback[256];        /* device AUTO looked for a GPU and found none usable: why
                                      (the CPU converted); else empty */
    char output[4096];             /* path written (the index for sharded outputs) */
    char preset[32];               /* the preset applied (feather_plan_preset), "none" if none */
    uint64_t tensors_converted, tensors_kept;
    uint64_t bytes_in, bytes_out;
    double snr_mean_db, snr_worst_db; /* over converted tensors (weight space) */
    char worst_tensor[256];
    double seconds;
    int nwarnings;
    char warnings[FEATHER_MAX_WARNINGS][256];
} feather_convert_result;

/* Default output path beside the input: NAME-fp8e5m2.safetensors (".zst" appended when
 * zstd is set), or the index name for a sharded input. Into 'dir' when dir != NULL. */
feather_status feather_default_output(const char *input, const char *dir, feather_fp8 fmt,
                                      int zstd, char *buf, size_t len, feather_error *err);

/* The device feather_convert takes for `want` when the conversion quantises `bytes` of weights
 * (F16/BF16/F32 and requantised fp8 tensors) with scales of `mode`: AUTO stays AUTO (the GPU when
 * one is usable) only where this process may run on fewer than 8 cores (feather_cores), the
 * scales are per channel or per block, and there is at least half a gigabyte to quantise per
 * core; else it becomes the CPU, without looking for a GPU. There the CPU converts as fast as
 * the GPU or faster: from 8 cores on; below that size, where the GPU's start-up (about 0.3 s)
 * is not won back; with whole-tensor scales (none, absmax, tensor), which the GPU finds in two
 * passes. CPU and GPU stay as they are. */
feather_device feather_convert_device(feather_device want, feather_scale_mode mode, uint64_t bytes);

/* Converts one input (a file, .zst file, index.json or directory) into output. */
feather_status feather_convert(feather_ctx *ctx, const char *input, const char *output,
                               const feather_convert_options *o, feather_convert_result *res,
                               feather_error *err);

#ifdef __cplusplus
}
#endif
#endif

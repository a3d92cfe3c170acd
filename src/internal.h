/* Internal helpers shared by the library's modules. Not installed. */
#ifndef FEATHER_INTERNAL_H
#define FEATHER_INTERNAL_H

#include "feather/feather.h"
#include "feather/convert.h"
#include "feather/quant.h"
#include "feather/safetensors.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#if defined(__GNUC__)
#define FEATHER_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define FEATHER_PRINTF(a, b)
#endif

/* Fills err (if not NULL) and returns code. Messages are one line: callers format them as
 * "FILE: tensor 'NAME': rule". */
feather_status feather_fail(feather_error *err, feather_status code, const char *fmt, ...)
    FEATHER_PRINTF(3, 4);
/* Prefixes an existing message with "prefix: " (keeps the code). */
feather_status feather_fail_prefix(feather_error *err, feather_status code, const char *fmt, ...)
    FEATHER_PRINTF(3, 4);

/* The NaN/Inf rule, worded once for every place that enforces it: "PREFIX" N "NaN/Inf" WHAT and
 * the option that maps them. Returns FEATHER_E_INVALID. */
feather_status feather_fail_nonfinite(feather_error *err, const char *prefix, uint64_t n, const char *what);

/* "tensor 'NAME': " with the name escaped as feather_quote does, or "" for no name: the start
 * of a message about one tensor. Returns buf. */
const char *feather_tensor_prefix(const char *name, char *buf, size_t len);

/* Escapes a tensor name for a one-line message (control bytes become \xNN), truncating. */
const char *feather_quote(const char *s, char *buf, size_t len);

/* ---- thread pool ---- */
/* Calls fn(arg, begin, end, worker) over [0, n) split into chunks of at least 'grain' items,
 * using every worker of ctx (the caller's thread included). Returns when all are done.
 * ctx may be NULL (runs on the caller's thread). */
typedef void (*feather_range_fn)(void *arg, size_t begin, size_t end, int worker);
void feather_parallel_for(const feather_ctx *ctx, size_t n, size_t grain, feather_range_fn fn,
                          void *arg);

/* ---- SIMD ---- */
feather_simd feather_simd_cpu(void); /* what the CPU supports, ignoring the environment */

/* ---- misc ---- */
static inline uint64_t feather_rd64le(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline void feather_wr64le(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
/* Element i of an F16, BF16 or F32 array as f32 (exact); NaN for other dtypes. Unaligned
 * arrays are fine. */
float feather_load_f32(feather_dtype dt, const void *p, uint64_t i);

/* A tensor's shape as "[a, b, c]" into buf (cut short with "...]" where it does not fit). */
const char *feather_shape_str(const feather_tensor *t, char *buf, size_t len);

/* How an fp8 weight [N, K]'s scales are laid out: mode and group as quant.h's, count scales once
 * loaded; rows > 0 for blocks of rows × 128 elements, the last ones short: 128 rows for
 * DeepSeek's weight_scale_inv and compressed-tensors' block strategy ([⌈N/128⌉, ⌈K/128⌉]), 1 for
 * groups of 128 along each row where 128 does not divide K ([N, ⌈K/128⌉]). They load as every
 * row's block:group scales, group = gcd(128, K). swizzled for the 8-bit block scales of
 * ComfyUI's MXFP8 (E8M0, G = 32) and NVFP4 (E4M3, G = 16) layers, which it stores in cuBLAS's
 * tiled order: [⌈N/128⌉ · 128, ⌈K/G/4⌉ · 4], each tile of 128 rows × 4 groups 512 bytes, row r
 * of a tile at (r % 32) · 16 + (r / 32) · 4. */
typedef struct feather_scale_layout {
    feather_scale_mode mode;
    unsigned group, rows, swizzled;
    feather_dtype dtype; /* 8-bit block scales (swizzled, or an FP4 weight's in row order): F8_E8M0
                            or F8_E4M3, what the bytes are read as */
    uint64_t count;
} feather_scale_layout;

/* The layout of scale tensor s (NULL: one scale of 1) of an fp8 weight [N, K] (an NVFP4 one's
 * [N, K] values), told by its shape: one element: tensor; [N] or [N, 1]: channel; [N, K/G] for G
 * a multiple of 16 dividing K: block:G; [⌈N/128⌉, ⌈K/128⌉] or [N, ⌈K/128⌉]: blocks with short
 * last ones. A 1-D tensor of N · K/G elements is block:G too, as feather's own files and older
 * writers hold them. F8_E8M0 and F8_E4M3 scales are taken for swizzled blocks (above), as a
 * ComfyUI layer holds them; feather_quant_scales_of checks the layer's tag, and reads ModelOpt's
 * row-order E4M3 ones. -1 when it fits none, -2 when s is of another dtype (integers, or E8M0
 * in another shape). */
int feather_scale_layout_of(const feather_tensor *s, uint64_t n, uint64_t k, feather_scale_layout *L);

/* L's count scales from the data sd of scale tensor s as f32 into out, or ones where s is NULL;
 * 2-D blocks spread over the groups of their rows. Returns the index in s of the first scale
 * that is not finite and > 0, which no fp8 weight can be dequantised with (8-bit block scales
 * may be 0, for a block of zeros), or s's element count (1 without s) when there is none. */
uint64_t feather_scales_load(const feather_tensor *s, const void *sd, const feather_scale_layout *L, uint64_t k,
                             float *out);

/* Whether L's scales are 8-bit block scales (read as L->dtype, and 0 allowed for a block of
 * zeros) rather than floats read as their tensor's dtype. */
static inline int feather_scales_are_bytes(const feather_scale_layout *L) {
    return L->dtype == FEATHER_F8_E4M3 || L->dtype == FEATHER_F8_E8M0;
}

/* Element i of scale tensor s (data sd) as layout L reads it. */
float feather_scale_at(const feather_tensor *s, const void *sd, const feather_scale_layout *L, uint64_t i);

/* feather_quantize_with (quant.h) of a band of n rows of a weight of ldn rows (n ≤ ldn): w, scales
 * and stats are the band's, q the output's first byte of the band's first row (for packed output
 * the whole weight's q + 16 · r0, for plain q + r0 · K). The same codes as the whole weight's. */
feather_status feather_quantize_band(feather_ctx *ctx, const feather_quant_options *opts, feather_dtype dtype,
                                     const void *w, uint64_t n, uint64_t k, uint64_t ldn, const float *scales,
                                     int packed, uint8_t *q, feather_quant_stats *stats, feather_error *err);

/* The tensor (or absmax) scale of an f32 weight whose rows come in parts, as feather_scale_search
 * finds it for the whole weight: feather_scale_tensor_part with cs NULL over every part gives
 * each part's largest magnitude (*amax; their maximum is the weight's); feather_scale_tensor_cands
 * of that maximum either settles the scale (returns 0, *scale set) or returns the number of
 * candidates nr in cs and ci; feather_scale_tensor_part with them over every part writes nr
 * totals a row into rowtot; feather_scale_tensor_pick of all the rows' totals, in row order,
 * returns the scale. NaN/Inf weights fail a part unless the options allow them. */
feather_status feather_scale_tensor_part(feather_ctx *ctx, const feather_quant_options *o, const float *w,
                                         uint64_t n, uint64_t k, const float *cs, const float *ci, unsigned nr,
                                         float *amax, float *rowtot, feather_error *err);
unsigned feather_scale_tensor_cands(feather_simd simd, const feather_quant_options *o, float amax, float *cs,
                                    float *ci, float *scale);
float feather_scale_tensor_pick(const float *cs, const float *rowtot, uint64_t n, unsigned nr);

/* feather_dequantize (quant.h) of rows [r0, r1) only, into out [r1 - r0, K] (row r0 first),
 * with the decoding kernels of level simd (the same bits at every level): ranges of rows run on
 * threads of their own. */
void feather_dequantize_rows(feather_simd simd, const uint8_t *q, int packed, feather_fp8 fmt, feather_scale_mode mode,
                             unsigned group, const float *scales, uint64_t n, uint64_t k, uint64_t r0, uint64_t r1,
                             float *out);

/* FP4 codes [N, K/2] (two E2M1 values a byte, the even column in the high nibble as ComfyUI
 * packs them, or in the low one where low_first, as ModelOpt and compressed-tensors do) to f32
 * [N, K]: out = code · block scale · tensor scale, rounded once (the first product is exact).
 * scales: N · K/group block scales in row order (16 values each for NVFP4, 32 for MXFP4). */
void feather_dequantize_fp4(const uint8_t *q, int low_first, unsigned group, const float *scales, float tensor_scale,
                            uint64_t n, uint64_t k, float *out);

/* Rows [r0, r1) of a quantised checkpoint's weight [N, K] into out (row r0 first): fp8 codes
 * (dtype, packed (K/16, N, 16) or plain) with scales of layout L, or FP4 ones (fp4 values a
 * block scale, tensor scale g) as feather_fp4_of finds them; scales as feather_scales_load reads
 * them (with feather_fp4_tensor_scale applied). */
void feather_dequantize_weight(feather_simd simd, const uint8_t *q, feather_dtype dtype, int packed,
                               const feather_scale_layout *L, unsigned fp4, const float *scales, float g, uint64_t n,
                               uint64_t k, uint64_t r0, uint64_t r1, float *out);

/* A JSON object's members by name (json_index.c), for objects with a member per tensor. init
 * returns -1 when out of memory; an index of NULL or of a non-object is empty. get returns the
 * first member of that name, as cJSON_GetObjectItemCaseSensitive does, or NULL. */
struct cJSON;
typedef struct feather_json_index {
    void *m;
    size_t n;
} feather_json_index;
int feather_json_index_init(feather_json_index *ix, const struct cJSON *obj);
const struct cJSON *feather_json_index_get(const feather_json_index *ix, const char *name);
void feather_json_index_free(feather_json_index *ix);

/* The entry of layer "X" in the "layers" of its shard's _quantization_metadata (ComfyUI's
 * per-layer header), NULL where there is none (no such metadata, not JSON, no such layer). The
 * metadata is parsed for every shard on the first call and kept until feather_close; the first
 * call is not thread-safe. */
const struct cJSON *feather_quant_layer(feather_reader *r, unsigned shard, const char *layer);

/* The format of the layer of weight "X.weight" in its ComfyUI tag (X.comfy_quant, or its
 * shard's _quantization_metadata) into fmt: "" where it has none, "?" where its comfy_quant
 * tensor cannot be read (a reader of the header alone, for a plan: the tensors around it tell). */
void feather_comfy_format(feather_reader *r, const feather_tensor *w, char *fmt, size_t len);

/* An FP4 weight feather reads: U8 [N, K/2] codes, two E2M1 values a byte, with 8-bit block
 * scales and, for NVFP4, a float tensor scale:
 * - ComfyUI's "nvfp4" layers: X.weight, E4M3 (or U8) block scales X.weight_scale per 16 values in
 *   cuBLAS's tiles (their layout says swizzled), tensor scale X.weight_scale_2; the even column
 *   in the high nibble;
 * - NVIDIA ModelOpt's NVFP4 (no ComfyUI tag): the same names, E4M3 [N, K/16] in row order, the
 *   even column in the low nibble;
 * - compressed-tensors' NVFP4 and MXFP4: X.weight_packed, block scales X.weight_scale in row
 *   order, E4M3 [N, K/16] with a global scale X.weight_global_scale that divides them (NVFP4),
 *   or E8M0 (stored as U8) [N, K/32] and none (MXFP4); the even column in the low nibble. */
typedef struct feather_fp4 {
    const feather_tensor *scale, *scale2; /* block scales; tensor scale (NULL for MXFP4) */
    unsigned group;                       /* values per block scale: 16 (NVFP4) or 32 (MXFP4) */
} feather_fp4;

/* Whether w is such a weight; its scales and group into *f (zeroed when it is not). */
int feather_fp4_of(feather_reader *r, const feather_tensor *w, feather_fp4 *f);

/* Whether FP4 weight w's tensor scale divides its block scales (compressed-tensors') rather than
 * multiplying them. */
int feather_fp4_divides(const feather_tensor *w);

/* An FP4 weight's tensor scale (s2 with data d2; none for MXFP4: 1) into *g, or, where it divides
 * (feather_fp4_divides), folded into its count block scales as compressed-tensors computes them,
 * each s / g rounded once, and *g = 1. 0, or -1 where it is not finite and > 0. */
int feather_fp4_tensor_scale(const feather_tensor *w, const feather_tensor *s2, const void *d2, float *scales,
                             uint64_t count, float *g);

/* Whether an FP4 weight of fp4 values per block scale (feather_fp4's group) keeps its own blocks
 * under q: every E2M1 value (0, 0.5 … 6) times a block scale is an e5m2 and an e4m3 code times
 * that scale, so at block:G for G dividing its group only the scales' rounding to f32 is lost. */
static inline int feather_fp4_keeps_blocks(const feather_quant_options *q, unsigned fp4) {
    return fp4 && q->mode == FEATHER_SCALE_BLOCK && q->group && fp4 % q->group == 0;
}

/* The layout of the scales s (and s2, an NVFP4 weight's tensor scale) of quantised weight w
 * [N, K] in reader r (fp4: an FP4 weight's group, else 0), as feather_scale_layout_of, where
 * 8-bit block scales are those of a ComfyUI layer of their format (F8_E4M3 or F8_E8M0, or U8
 * bytes read as those, as ComfyUI reads them), or an untagged FP4 weight's row-order ones
 * (ModelOpt's and compressed-tensors'): -1 where an FP4 weight's are not such blocks (and one
 * float for NVFP4), -2 where other 8-bit scales are not E8M0 ones of an mxfp8 layer (other
 * writers' E8M0 may be in row order). */
int feather_quant_scales_of(feather_reader *r, const feather_tensor *w, const feather_tensor *s,
                            const feather_tensor *s2, unsigned fp4, uint64_t n, uint64_t k, feather_scale_layout *L);

/* The entry of plan p (made from r) whose tensor is written under name: r's tensor of that name,
 * or compressed-tensors' name + "_packed" written as name; NULL where there is none. */
const feather_plan_entry *feather_plan_find(const feather_plan *p, const feather_reader *r, const char *name);

/* Index of t in r (feather_tensor_at's i), or (size_t)-1 when t is not one of r's tensors. */
size_t feather_tensor_index(const feather_reader *r, const feather_tensor *t);

/* The scale tensor of an fp8 weight "X.weight": X.weight_scale, DeepSeek's X.weight_scale_inv
 * (multiplied too, despite its name) or the legacy X.scale_weight; NULL when it has none. */
const feather_tensor *feather_fp8_scale_of(feather_reader *r, const char *wname);

/* The directory part of path into dir: "." for a bare name, "/" for a name in the root. -1
 * when it does not fit. */
static inline int feather_dir_of(const char *path, char *dir, size_t len) {
    const char *slash = strrchr(path, '/');
    const int n = !slash ? snprintf(dir, len, ".") : slash == path ? snprintf(dir, len, "/")
                                                                   : snprintf(dir, len, "%.*s", (int)(slash - path), path);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* Alignment-safe scalar element loads: a safetensors tensor may start at any byte (MLX and
 * writers before 2023 do not align them), and a typed load from it would be undefined. */
static inline uint16_t feather_ld16(const void *p, size_t i) {
    uint16_t v;
    memcpy(&v, (const unsigned char *)p + 2 * i, 2);
    return v;
}
static inline float feather_ldf32(const void *p, size_t i) {
    float v;
    memcpy(&v, (const unsigned char *)p + 4 * i, 4);
    return v;
}

static inline int feather_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Whether d is one of the float dtypes weights, activations and scales are read in (F16, BF16, F32). */
static inline int feather_is_float(feather_dtype d) { return d == FEATHER_F16 || d == FEATHER_BF16 || d == FEATHER_F32; }

/* Whether d is one of the fp8 dtypes an fp8 checkpoint's weights come in (E5M2, E4M3). */
static inline int feather_is_fp8(feather_dtype d) { return d == FEATHER_F8_E5M2 || d == FEATHER_F8_E4M3; }

/* The fp8 format of an F8_E5M2 or F8_E4M3 tensor. */
static inline feather_fp8 feather_fp8_of(feather_dtype d) {
    return d == FEATHER_F8_E5M2 ? FEATHER_FP8_E5M2 : FEATHER_FP8_E4M3FN;
}

/* Whether t is a legacy ComfyUI "PREFIX.scaled_fp8" marker (its dtype and size say how the
 * file's fp8 layers are run; at most one element). */
static inline int feather_is_scaled_fp8_marker(const feather_tensor *t) {
    return feather_ends_with(t->name, "scaled_fp8") && t->ndim <= 1;
}

/* XXH3-64 of one shard's bytes in file order (length, header, then tensors by offset), i.e. of
 * the file itself: what feather.source_xxh3 records. Drops each tensor's pages once hashed. */
feather_status feather_shard_xxh3(feather_reader *r, unsigned shard, uint64_t *out, feather_error *err);

/* The same hash taken while a reader visits the shard's tensors in its own order (the verifier
 * follows the converted file): begin hashes the header; a tensor the hasher wants (the shard's
 * next in file order) is fed when its data is at hand; finish hashes whatever was skipped, from
 * the first tensor not fed on, and frees the state (free alone abandons it). */
typedef struct feather_shard_hasher {
    void *state;
    unsigned shard;
    size_t next; /* index of the next tensor to hash */
} feather_shard_hasher;
feather_status feather_shard_hasher_begin(feather_shard_hasher *s, feather_reader *r, unsigned shard,
                                          feather_error *err);
int feather_shard_hasher_wants(const feather_shard_hasher *s, feather_reader *r, const feather_tensor *t);
void feather_shard_hasher_feed(feather_shard_hasher *s, feather_reader *r, const void *data, size_t len);
feather_status feather_shard_hasher_finish(feather_shard_hasher *s, feather_reader *r, uint64_t *out,
                                           feather_error *err);
void feather_shard_hasher_free(feather_shard_hasher *s);

/* Seconds on the monotonic clock (durations in results, profiles and progress). */
static inline double feather_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Overflow-checked multiply: returns 0 on overflow. */
static inline int feather_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

#endif

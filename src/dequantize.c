/* Dequantisation of plain (N, K) or packed (K/16, N, 16) fp8 codes to f32: out = f32(q) · s,
 * one f32 multiply, with the scale chosen by the mode (see quant.h): none, absmax and tensor
 * use scales[0] (1 when scales is NULL), channel scales[n], block scales[n·K/G + k/G]; and of
 * FP4 codes (NVFP4, MXFP4). Also how a quantised checkpoint's scales are found and read: their
 * tensor's name, their layer's ComfyUI format and, from their shape, their layout. */
#include "internal.h"
#include "feather/quant.h"
#include "quant_kernels.h"

#include <cJSON.h>
#include <math.h>
#include <stdio.h>

const feather_tensor *feather_fp8_scale_of(feather_reader *r, const char *wname) {
    const size_t len = strlen(wname);
    char buf[4096];
    if (len + 12 > sizeof buf) return NULL;
    static const char *const tails[] = {"_scale", "_scale_inv"};
    for (int i = 0; i < 2; i++) {
        snprintf(buf, sizeof buf, "%s%s", wname, tails[i]);
        const feather_tensor *s = feather_find(r, buf);
        if (s) return s;
    }
    if (!feather_ends_with(wname, ".weight")) return NULL;
    snprintf(buf, sizeof buf, "%.*s.scale_weight", (int)(len - 7), wname);
    return feather_find(r, buf);
}

/* The scale mode of count scales told by their number alone: one (tensor), N (channel) or
 * N · K/G for G a multiple of 16 dividing K (block:G). */
static int mode_by_count(uint64_t count, uint64_t n, uint64_t k, feather_scale_layout *L) {
    L->count = count;
    if (count == 1) { L->mode = FEATHER_SCALE_TENSOR; return 0; }
    if (count == n) { L->mode = FEATHER_SCALE_CHANNEL; return 0; }
    /* count > n first: no division by zero for a tensor of no scales */
    if (count > n && count % n == 0 && k % (count / n) == 0 && (k / (count / n)) % 16 == 0) {
        L->mode = FEATHER_SCALE_BLOCK;
        L->group = (unsigned)(k / (count / n));
        return 0;
    }
    return -1;
}

/* 8-bit block scales in cuBLAS's tiles (see internal.h): ComfyUI's MXFP8 (E8M0 per 32 values)
 * and NVFP4 (E4M3 per 16) layers. */
static int swizzled_layout(const feather_tensor *s, feather_dtype dt, uint64_t n, uint64_t k, feather_scale_layout *L) {
    const unsigned g = dt == FEATHER_F8_E8M0 ? 32 : 16;
    const uint64_t groups = k / g;
    if (s->ndim != 2 || k % g || s->shape[0] != (n + 127) / 128 * 128 || s->shape[1] != (groups + 3) / 4 * 4) return -2;
    L->mode = FEATHER_SCALE_BLOCK;
    L->group = g;
    L->swizzled = 1;
    L->dtype = dt;
    L->count = n * groups;
    return 0;
}

int feather_scale_layout_of(const feather_tensor *s, uint64_t n, uint64_t k, feather_scale_layout *L) {
    memset(L, 0, sizeof *L);
    if (s && (s->dtype == FEATHER_F8_E8M0 || s->dtype == FEATHER_F8_E4M3)) return swizzled_layout(s, s->dtype, n, k, L);
    if (s && !feather_is_float(s->dtype)) return -2;
    if (!s || s->nelem == 1 || s->ndim != 2) return mode_by_count(s ? s->nelem : 1, n, k, L);
    /* A 2-D tensor says what it is by its shape: its rows are the weight's rows, or blocks of
     * 128 of them (a count alone mistakes [N/128, K/128] for N channel scales at K = 16384). */
    const uint64_t r = s->shape[0], c = s->shape[1];
    if (r == n && c && k % c == 0 && (c == 1 || (k / c) % 16 == 0)) return mode_by_count(s->nelem, n, k, L);
    /* Blocks of 128 × 128, or groups of 128 along each row whose last one is short (K not a
     * multiple of 128): spread over groups of G = gcd(128, K), which lie inside one block each. */
    if ((r == n || (r < n && r == (n + 127) / 128)) && c == (k + 127) / 128) {
        unsigned g = 128;
        while (k % g) g /= 2;
        L->mode = FEATHER_SCALE_BLOCK;
        L->group = g;
        L->rows = r == n ? 1 : 128;
        L->count = n * (k / g);
        return 0;
    }
    return -1;
}

/* Where scale (row r, group c) of a swizzled tensor of cols columns lies. */
static uint64_t swizzled_at(uint64_t r, uint64_t c, uint64_t cols) {
    return ((r / 128) * (cols / 4) + c / 4) * 512 + (r % 32) * 16 + (r % 128 / 32) * 4 + c % 4;
}

float feather_scale_at(const feather_tensor *s, const void *sd, const feather_scale_layout *L, uint64_t i) {
    return feather_load_f32(feather_scales_are_bytes(L) ? L->dtype : s->dtype, sd, i);
}

uint64_t feather_scales_load(const feather_tensor *s, const void *sd, const feather_scale_layout *L, uint64_t k,
                             float *out) {
    const uint64_t count = s ? s->nelem : 1;
    if (L->swizzled) {
        const uint64_t per_row = k / L->group;
        for (uint64_t i = 0; i < L->count; i++) {
            const uint64_t at = swizzled_at(i / per_row, i % per_row, s->shape[1]);
            const float v = out[i] = feather_scale_at(s, sd, L, at);
            if (!isfinite(v) || v < 0) return at;
        }
        return count;
    }
    /* an FP4 weight's 8-bit block scales in row order may be 0, for a block of zeros */
    const int bytes = feather_scales_are_bytes(L);
    for (uint64_t i = 0; i < count; i++) {
        const float v = s ? feather_scale_at(s, sd, L, i) : 1.0f;
        if (!isfinite(v) || !(v > 0 || (bytes && v == 0))) return i;
        if (!L->rows) out[i] = v;
    }
    if (L->rows) {
        const uint64_t per_row = k / L->group, cols = s->shape[1];
        for (uint64_t i = 0; i < L->count; i++)
            out[i] = feather_load_f32(s->dtype, sd, (i / per_row / L->rows) * cols + (i % per_row) * L->group / 128);
    }
    return count;
}

void feather_dequantize_fp4(const uint8_t *q, int low_first, unsigned group, const float *scales, float tensor_scale,
                            uint64_t n, uint64_t k, float *out) {
    static const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    const int even = low_first ? 0 : 4, odd = 4 - even;
    for (uint64_t i = 0; i < n * k; i += 16) {
        /* code × block scale has at most 2 + 4 significant bits (E4M3; E8M0 is a power of two),
         * exact in f32, so the product with the tensor scale is the one rounding (as if done in
         * double and rounded once). */
        const float s = scales[i / group];
        for (int j = 0; j < 16; j += 2) {
            const uint8_t b = q[(i + j) / 2];
            out[i + j] = e2m1[(b >> even) & 15] * s * tensor_scale;
            out[i + j + 1] = e2m1[(b >> odd) & 15] * s * tensor_scale;
        }
    }
}

void feather_comfy_format(feather_reader *r, const feather_tensor *w, char *fmt, size_t len) {
    char layer[4096], tag[4200];
    fmt[0] = 0;
    if (!feather_ends_with(w->name, ".weight") || strlen(w->name) >= sizeof layer) return;
    snprintf(layer, sizeof layer, "%.*s", (int)(strlen(w->name) - 7), w->name);
    snprintf(tag, sizeof tag, "%s.comfy_quant", layer);
    const feather_tensor *t = feather_find(r, tag);
    cJSON *root = NULL; /* a comfy_quant tensor's, parsed here */
    const cJSON *conf = NULL;
    const void *d;
    feather_error err;
    if (t && t->dtype == FEATHER_U8) {
        /* a reader of the header alone (a plan) sees the tag but not what it says */
        if (feather_tensor_data(r, t, &d, &err)) {
            snprintf(fmt, len, "?");
            return;
        }
        conf = root = cJSON_ParseWithLength(d, t->nbytes);
    } else {
        conf = feather_quant_layer(r, w->shard, layer);
    }
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(conf, "format");
    if (cJSON_IsString(f)) snprintf(fmt, len, "%s", f->valuestring);
    cJSON_Delete(root);
}

int feather_quant_scales_of(feather_reader *r, const feather_tensor *w, const feather_tensor *s,
                            const feather_tensor *s2, unsigned fp4, uint64_t n, uint64_t k, feather_scale_layout *L) {
    char f[16] = "";
    if (fp4 || (s && (s->dtype == FEATHER_U8 || s->dtype == FEATHER_F8_E8M0))) feather_comfy_format(r, w, f, sizeof f);
    const int tagged = !strcmp(f, fp4 ? "nvfp4" : "mxfp8") || !strcmp(f, "?");
    const feather_dtype fp4_dt = fp4 == 32 ? FEATHER_F8_E8M0 : FEATHER_F8_E4M3;
    int fit;
    if (fp4 && !f[0]) {
        /* ModelOpt's and compressed-tensors' FP4 (no ComfyUI tag): block scales [N, K/G] in row
         * order, E4M3 per 16 values, or E8M0 per 32 (compressed-tensors stores those as U8) */
        fit = s && (s->dtype == fp4_dt || (fp4 == 32 && s->dtype == FEATHER_U8)) && s->ndim == 2 && k && k % fp4 == 0 &&
                      s->shape[0] == n && s->shape[1] == k / fp4
                  ? 0
                  : -1;
        /* blocks, even where one a row makes their count N's */
        *L = (feather_scale_layout){.mode = FEATHER_SCALE_BLOCK, .group = fp4, .dtype = fp4_dt, .count = n * (k / fp4)};
    } else if (s && s->dtype == FEATHER_U8) {
        /* ComfyUI also reads its 8-bit block scales from U8 bytes, as older files store them */
        memset(L, 0, sizeof *L);
        fit = tagged ? swizzled_layout(s, fp4 ? FEATHER_F8_E4M3 : FEATHER_F8_E8M0, n, k, L) : -2;
    } else {
        fit = feather_scale_layout_of(s, n, k, L);
    }
    if (fp4) {
        const int tensor_ok = fp4 == 32 ? !s2 : s2 && s2->nelem == 1 && feather_is_float(s2->dtype);
        return fit || L->dtype != fp4_dt || L->group != fp4 || !tensor_ok || w->nbytes * 2 != n * k ? -1 : 0;
    }
    if (fit || !L->swizzled) return fit;
    return !tagged || L->dtype != FEATHER_F8_E8M0 ? -2 : 0;
}

int feather_fp4_divides(const feather_tensor *w) { return feather_ends_with(w->name, ".weight_packed"); }

int feather_fp4_of(feather_reader *r, const feather_tensor *w, feather_fp4 *f) {
    memset(f, 0, sizeof *f);
    if (w->dtype != FEATHER_U8 || w->ndim != 2) return 0;
    char name[4200];
    const size_t len = strlen(w->name);
    if (len + 16 > sizeof name) return 0;
    if (feather_fp4_divides(w)) {
        /* compressed-tensors: X.weight_packed beside X.weight_scale, and for NVFP4 X.weight_global_scale */
        snprintf(name, sizeof name, "%.*s_scale", (int)(len - 7), w->name);
        const feather_tensor *s = feather_find(r, name);
        snprintf(name, sizeof name, "%.*s_global_scale", (int)(len - 7), w->name);
        const feather_tensor *g = feather_find(r, name);
        if (!s || s->ndim != 2 || s->shape[0] != w->shape[0]) return 0;
        if (g && s->dtype == FEATHER_F8_E4M3 && s->shape[1] * 8 == w->shape[1]) *f = (feather_fp4){s, g, 16};
        else if (!g && (s->dtype == FEATHER_U8 || s->dtype == FEATHER_F8_E8M0) && s->shape[1] * 16 == w->shape[1])
            *f = (feather_fp4){s, NULL, 32};
        return f->group != 0;
    }
    char fmt[16];
    feather_comfy_format(r, w, fmt, sizeof fmt);
    const feather_tensor *s = feather_fp8_scale_of(r, w->name);
    snprintf(name, sizeof name, "%s_scale_2", w->name);
    const feather_tensor *s2 = feather_find(r, name);
    /* ComfyUI's (tagged; block scales E4M3 or U8) or ModelOpt's (no tag; E4M3 [N, K/16]) */
    const int comfy = (!strcmp(fmt, "nvfp4") || !strcmp(fmt, "?")) && s &&
                      (s->dtype == FEATHER_F8_E4M3 || s->dtype == FEATHER_U8);
    const int modelopt = !fmt[0] && s && s->dtype == FEATHER_F8_E4M3 && s->ndim == 2 && s->shape[0] == w->shape[0] &&
                         s->shape[1] * 8 == w->shape[1];
    if (!s2 || !(comfy || modelopt)) return 0;
    *f = (feather_fp4){s, s2, 16};
    return 1;
}

int feather_fp4_tensor_scale(const feather_tensor *w, const feather_tensor *s2, const void *d2, float *scales,
                             uint64_t count, float *g) {
    *g = s2 ? feather_load_f32(s2->dtype, d2, 0) : 1.0f;
    if (!isfinite(*g) || !(*g > 0)) return -1;
    if (!s2 || !feather_fp4_divides(w)) return 0;
    /* compressed-tensors divides each block scale by the global one before it multiplies */
    for (uint64_t i = 0; i < count; i++) scales[i] /= *g;
    *g = 1;
    return 0;
}

void feather_dequantize_rows(feather_simd simd, const uint8_t *q, int packed, feather_fp8 fmt, feather_scale_mode mode,
                             unsigned group, const float *scales, uint64_t n, uint64_t k, uint64_t r0, uint64_t r1,
                             float *out) {
    const feather_decode_fn decode = feather_decode_kernel(simd);
    float lut[256]; /* for the scalar level: a table beats decoding each code */
    for (int i = 0; simd < FEATHER_SIMD_AVX2 && i < 256; i++) lut[i] = feather_fp8_to_f32((uint8_t)i, fmt);
    uint64_t g = mode == FEATHER_SCALE_BLOCK && group ? group : k;
    uint64_t per_row = k / (g ? g : 1);
    for (uint64_t r = r0; r < r1; r++) {
        float *o = out + (r - r0) * k;
        for (uint64_t c0 = 0; c0 < k; c0 += g) {
            float s = !scales                         ? 1.0f
                      : mode == FEATHER_SCALE_CHANNEL       ? scales[r]
                      : mode == FEATHER_SCALE_BLOCK         ? scales[r * per_row + c0 / g]
                                                            : scales[0];
            uint64_t c1 = c0 + g < k ? c0 + g : k;
            if (simd >= FEATHER_SIMD_AVX2) {
                /* runs of contiguous codes: the row's, or a packed row's 16 per k/16 row */
                for (uint64_t c = c0, e; c < c1; c = e) {
                    e = packed ? (c / 16 + 1) * 16 : c1;
                    if (e > c1) e = c1;
                    decode(packed ? q + (c / 16) * 16 * n + 16 * r + c % 16 : q + r * k + c, e - c, s, fmt, o + c);
                }
            } else if (packed) {
                for (uint64_t c = c0; c < c1; c++) o[c] = lut[q[(c / 16) * 16 * n + 16 * r + c % 16]] * s;
            } else {
                for (uint64_t c = c0; c < c1; c++) o[c] = lut[q[r * k + c]] * s;
            }
        }
    }
}

void feather_dequantize(const uint8_t *q, int packed, feather_fp8 fmt, feather_scale_mode mode, unsigned group,
                        const float *scales, uint64_t n, uint64_t k, float *out) {
    feather_dequantize_rows(feather_simd_detect(), q, packed, fmt, mode, group, scales, n, k, 0, n, out);
}

void feather_dequantize_weight(feather_simd simd, const uint8_t *q, feather_dtype dtype, int packed,
                               const feather_scale_layout *L, unsigned fp4, const float *scales, float g, uint64_t n,
                               uint64_t k, uint64_t r0, uint64_t r1, float *out) {
    if (fp4)
        feather_dequantize_fp4(q + r0 * k / 2, !L->swizzled, fp4, scales + r0 * k / fp4, g, r1 - r0, k, out);
    else
        feather_dequantize_rows(simd, q, packed, feather_fp8_of(dtype), L->mode, L->group, scales, n, k, r0, r1, out);
}

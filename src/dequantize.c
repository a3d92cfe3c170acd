/* Dequantisation of plain (N, K) or packed (K/16, N, 16) fp8 codes to f32: out = f32(q) · s,
 * one f32 multiply, with the scale chosen by the mode (see quant.h): none, absmax and tensor
 * use scales[0] (1 when scales is NULL), channel scales[n], block scales[n·K/G + k/G]. Also
 * how an fp8 checkpoint's scales are found and read: their tensor's name and, from its shape,
 * their layout. */
#include "internal.h"
#include "feather/quant.h"

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

int feather_scale_layout_of(const feather_tensor *s, uint64_t n, uint64_t k, feather_scale_layout *L) {
    memset(L, 0, sizeof *L);
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

uint64_t feather_scales_load(const feather_tensor *s, const void *sd, const feather_scale_layout *L, uint64_t k,
                             float *out) {
    const uint64_t count = s ? s->nelem : 1;
    for (uint64_t i = 0; i < count; i++) {
        const float v = s ? feather_load_f32(s->dtype, sd, i) : 1.0f;
        if (!isfinite(v) || !(v > 0)) return i;
        if (!L->rows) out[i] = v;
    }
    if (L->rows) {
        const uint64_t per_row = k / L->group, cols = s->shape[1];
        for (uint64_t i = 0; i < L->count; i++)
            out[i] = feather_load_f32(s->dtype, sd, (i / per_row / L->rows) * cols + (i % per_row) * L->group / 128);
    }
    return count;
}

void feather_dequantize(const uint8_t *q, int packed, feather_fp8 fmt, feather_scale_mode mode,
                        unsigned group, const float *scales, uint64_t n, uint64_t k, float *out) {
    float lut[256];
    for (int i = 0; i < 256; i++) lut[i] = feather_fp8_to_f32((uint8_t)i, fmt);
    uint64_t g = mode == FEATHER_SCALE_BLOCK && group ? group : k;
    uint64_t per_row = k / (g ? g : 1);
    for (uint64_t r = 0; r < n; r++) {
        float *o = out + r * k;
        for (uint64_t c0 = 0; c0 < k; c0 += g) {
            float s = !scales                         ? 1.0f
                      : mode == FEATHER_SCALE_CHANNEL       ? scales[r]
                      : mode == FEATHER_SCALE_BLOCK         ? scales[r * per_row + c0 / g]
                                                            : scales[0];
            uint64_t c1 = c0 + g < k ? c0 + g : k;
            if (packed) {
                for (uint64_t c = c0; c < c1; c++) o[c] = lut[q[(c / 16) * 16 * n + 16 * r + c % 16]] * s;
            } else {
                for (uint64_t c = c0; c < c1; c++) o[c] = lut[q[r * k + c]] * s;
            }
        }
    }
}

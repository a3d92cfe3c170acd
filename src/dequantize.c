/* Dequantisation of plain (N, K) or packed (K/16, N, 16) fp8 codes to f32: out = f32(q) · s,
 * one f32 multiply, with the scale chosen by the mode (see quant.h): none, absmax and tensor
 * use scales[0] (1 when scales is NULL), channel scales[n], block scales[n·K/G + k/G]. Also
 * how an fp8 checkpoint's scales are found and read: their tensor's name and, from its size,
 * their layout. */
#include "internal.h"
#include "feather/quant.h"

#include <math.h>
#include <stdio.h>

const feather_tensor *feather_fp8_scale_of(feather_reader *r, const char *wname) {
    const size_t len = strlen(wname);
    char buf[4096];
    if (len + 8 > sizeof buf) return NULL;
    snprintf(buf, sizeof buf, "%s_scale", wname);
    const feather_tensor *s = feather_find(r, buf);
    if (s || !feather_ends_with(wname, ".weight")) return s;
    snprintf(buf, sizeof buf, "%.*s.scale_weight", (int)(len - 7), wname);
    return feather_find(r, buf);
}

uint64_t feather_scales_load(feather_dtype dt, const void *sd, uint64_t count, float *out) {
    for (uint64_t i = 0; i < count; i++) {
        out[i] = sd ? feather_load_f32(dt, sd, i) : 1.0f;
        if (!isfinite(out[i]) || !(out[i] > 0)) return i;
    }
    return count;
}

int feather_scale_mode_of(uint64_t count, uint64_t n, uint64_t k, feather_scale_mode *mode, unsigned *group) {
    *group = 0;
    if (count == 1) { *mode = FEATHER_SCALE_TENSOR; return 0; }
    if (count == n) { *mode = FEATHER_SCALE_CHANNEL; return 0; }
    /* count > n first: no division by zero for a tensor of no scales */
    if (count > n && count % n == 0 && k % (count / n) == 0 && (k / (count / n)) % 16 == 0) {
        *mode = FEATHER_SCALE_BLOCK;
        *group = (unsigned)(k / (count / n));
        return 0;
    }
    return -1;
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

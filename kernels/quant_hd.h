/*
 * The arithmetic of quantisation (include/feather/quant.h steps 1-6, the cast of fp8.h and the
 * error statistics of src/quant_kernels.h) as FK_HD functions: the GPU kernels
 * (kernels/quant.hip) are written with these and nothing else, and tests/test_gpu_quant.c runs
 * the same functions on the CPU against feather_scale_search and feather_quantize, so every bit
 * of the GPU's arithmetic is checked by `make check` on machines without a GPU.
 *
 * Every floating-point operation is spelled out as one call (fkq_mul, fkq_add, ...): on the
 * device these are the explicitly rounded intrinsics (__fmul_rn, ...), which no compiler fuses
 * into multiply-adds, and subnormals are kept (neither nvcc nor HIP flush them unless asked);
 * on the host they are the C operators, built with -ffp-contract=off.
 */
#ifndef FK_QUANT_HD_H
#define FK_QUANT_HD_H

#include "fk_hd.h"

#include <stdint.h>
#include <string.h>

#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define FKQ_DEVICE_PASS 1
#endif

/* ---- one IEEE operation each, round to nearest even ----
 * On the device the _rn intrinsics say so explicitly (no contraction into FMA whatever the
 * flags); on the host the build's -ffp-contract=off gives the same single roundings. */
#ifdef FKQ_DEVICE_PASS
#define FKQ_OP(name, type, intrinsic, op) \
    FK_HD type name(type a, type b) { return intrinsic(a, b); }
#else
#define FKQ_OP(name, type, intrinsic, op) \
    FK_HD type name(type a, type b) { return a op b; }
#endif
FKQ_OP(fkq_mul, float, __fmul_rn, *)
FKQ_OP(fkq_add, float, __fadd_rn, +)
FKQ_OP(fkq_sub, float, __fsub_rn, -)
FKQ_OP(fkq_div, float, __fdiv_rn, /)
FKQ_OP(fkq_dmul, double, __dmul_rn, *)
FKQ_OP(fkq_dadd, double, __dadd_rn, +)
FKQ_OP(fkq_dsub, double, __dsub_rn, -)
#undef FKQ_OP

FK_HD uint32_t fkq_bits(float f) {
#ifdef FKQ_DEVICE_PASS
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}
FK_HD float fkq_float(uint32_t u) {
#ifdef FKQ_DEVICE_PASS
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

/* ---- element loads: the exact widening f32(w) ---- */
enum { FKQ_F16 = 0, FKQ_BF16 = 1, FKQ_F32 = 2 }; /* = FK_DT_* of fk_api.h */

/* fp16 bits → f32, as feather_f16_to_f32: subnormals as m · 2^-24 (an exact product of normal
 * numbers, so no subnormal f32 is involved), the rest by moving the fields. */
FK_HD float fkq_f16(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return fkq_float(sign | 0x7f800000u | (m << 13));
    if (e == 0) return fkq_float(fkq_bits(fkq_mul((float)m, 0x1p-24f)) | sign);
    return fkq_float(sign | ((e + 112) << 23) | (m << 13));
}

FK_HD float fkq_load(int dt, const void *w, int64_t i) {
    if (dt == FKQ_F16) return fkq_f16(((const uint16_t *)w)[i]);
    if (dt == FKQ_BF16) return fkq_float((uint32_t)((const uint16_t *)w)[i] << 16);
    return ((const float *)w)[i];
}

/* NaN or ±Inf. */
FK_HD int fkq_nonfinite(float w) { return (fkq_bits(w) & 0x7f800000u) == 0x7f800000u; }

/* What the search sees of a weight: |f32(w)|, NaN/±Inf as 0 (quant.h: they count as 0). */
FK_HD float fkq_mag(float w) {
    uint32_t u = fkq_bits(w) & 0x7fffffffu;
    return fkq_float(u >= 0x7f800000u ? 0u : u);
}

/* ---- the format ---- */
typedef struct fkq_fmt {
    uint32_t emin; /* bits of the smallest normal: 2^-14 (e5m2), 2^-6 (e4m3fn) */
    uint32_t off;  /* (23 - mantissa bits) << 23 */
    float max;     /* 57344, 448 */
    int e4m3;
} fkq_fmt;

FK_HD fkq_fmt fkq_fmt_of(int e4m3) {
    fkq_fmt f;
    f.emin = e4m3 ? 0x3c800000u : 0x38800000u;
    f.off = e4m3 ? 20u << 23 : 21u << 23;
    f.max = e4m3 ? 448.0f : 57344.0f;
    f.e4m3 = e4m3;
    return f;
}

/* ---- the search ---- */
#define FKQ_MIN_SABS 0x1p-124f /* = SCALE_MIN_SABS of src/scale_internal.h */

/* Step 1: s_abs of a group with maximum magnitude amax, or 0 when the group gets s = 1. */
FK_HD float fkq_sabs(float amax, fkq_fmt f) {
    if (!(amax > 0.0f)) return 0.0f;
    float s = fkq_div(amax, f.max);
    return s >= FKQ_MIN_SABS ? s : 0.0f;
}

/* Step 2: candidate j from s_abs and its ratio r_j. */
FK_HD float fkq_cand_s(float sabs, float r) { return fkq_mul(sabs, r); }
FK_HD float fkq_inv(float s) { return fkq_div(1.0f, s); }

/* Step 3: round(x) without leaving f32: min((x + M) - M, max), M from x's exponent. */
FK_HD float fkq_round(float x, fkq_fmt f) {
    uint32_t e = fkq_bits(x) & 0x7f800000u;
    e = (e > f.emin ? e : f.emin) + f.off;
    float m = fkq_float(e);
    float v = fkq_sub(fkq_add(x, m), m);
    return v < f.max ? v : f.max;
}

/* Step 3: the error e = d·d of magnitude a under candidate (s, inv). */
FK_HD float fkq_err(float a, float s, float inv, fkq_fmt f) {
    float v = fkq_round(fkq_mul(a, inv), f);
    float d = fkq_sub(a, fkq_mul(s, v));
    return fkq_mul(d, d);
}
/* ... and with importance weight imp. */
FK_HD float fkq_err_imp(float a, float s, float inv, float imp, fkq_fmt f) {
    return fkq_mul(fkq_err(a, s, inv, f), imp);
}

/* Step 4: a lane adds its next error; the tree adds lane sums pairwise (l with l+8, then +4,
 * +2, +1). On the GPU the 16 lanes are 16 threads and each node is one fkq_add of a value and
 * the value of the thread whose lane index differs in one bit: the same sums (x + y == y + x). */
FK_HD float fkq_tree16(const float l[16]) {
    float a[8], b[4];
    for (int i = 0; i < 8; i++) a[i] = fkq_add(l[i], l[i + 8]);
    for (int i = 0; i < 4; i++) b[i] = fkq_add(a[i], a[i + 4]);
    return fkq_add(fkq_add(b[0], b[2]), fkq_add(b[1], b[3]));
}

/* Step 6: does total t beat the best so far (ties and NaN keep the earlier candidate)? */
FK_HD int fkq_better(float t, float best) { return t < best; }

/* ---- the cast: q = fp8(f32(w) · inv), RNE, saturating, NaN → +0 ---- */

/* fp8 code of an f32 (the codec's rounding): integer rounding of the pattern in the normal
 * range, the FPU's own rounding after adding a power of two (whose ulp is the fp8 subnormal
 * step) below it. Same operations as fp8_of_bits in src/fp8.c. */
FK_HD uint8_t fkq_encode(float x, int e4m3) {
    uint32_t u = fkq_bits(x);
    const unsigned shift = e4m3 ? 20 : 21;
    const float magic = e4m3 ? 16384.0f : 128.0f;
    uint32_t a = u & 0x7fffffffu;
    uint32_t r = a + ((1u << (shift - 1)) - 1) + ((a >> shift) & 1);
    uint32_t cn = (r >> shift) - (e4m3 ? (120u << 3) : (112u << 2));
    uint32_t maxc = e4m3 ? 0x7eu : 0x7bu;
    cn = cn < maxc ? cn : maxc;
    uint32_t cs = fkq_bits(fkq_add(fkq_float(a), magic)) - fkq_bits(magic);
    uint32_t c = a < (e4m3 ? 0x3c800000u : 0x38800000u) ? cs : cn;
    c |= (u >> 24) & 0x80u;
    return (uint8_t)(a > 0x7f800000u ? 0u : c);
}

FK_HD uint8_t fkq_cast(float w, float inv, int e4m3) { return fkq_encode(fkq_mul(w, inv), e4m3); }

/* The value of a code, exact in f32 (and so in double). */
FK_HD float fkq_decode(uint8_t q, int e4m3) {
    uint32_t sign = (uint32_t)(q & 0x80u) << 24;
    if (!e4m3) return fkq_f16((uint16_t)(q << 8));
    uint32_t e = (q >> 3) & 15u, m = q & 7u;
    if (e == 15 && m == 7) return fkq_float(sign | 0x7fc00000u);
    if (e == 0) return fkq_float(fkq_bits(fkq_mul((float)m, 1.0f / 512.0f)) | sign);
    return fkq_float(sign | ((e + 120) << 23) | (m << 20));
}

/* ---- error statistics (summary only): one lane of src/quant_kernels.h ----
 * Lane l of a row sees the columns c ≡ l (mod 8) in increasing order; the row's total is
 * ((0 + L0) + L1) + … + L7 and the tensor's the rows' totals in row order, all in double. */
typedef struct fkq_stat {
    double sum_sq, err_sq, max_err;
} fkq_stat;

FK_HD void fkq_stat_add(fkq_stat *l, float w, float s, float v) {
    if (fkq_nonfinite(w)) return;
    double dw = (double)w, e = fkq_dsub(dw, fkq_dmul((double)s, (double)v));
    l->sum_sq = fkq_dadd(l->sum_sq, fkq_dmul(dw, dw));
    l->err_sq = fkq_dadd(l->err_sq, fkq_dmul(e, e));
    double ae = e < 0 ? -e : e;
    if (ae > l->max_err) l->max_err = ae;
}

#endif

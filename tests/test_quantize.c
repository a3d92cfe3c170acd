/* feather_quantize: the scale search followed by feather_quantize_with on its scales. */
#include "test.h"
#include "feather/feather.h"

#include <math.h>
#include <stdlib.h>

static void *weights(feather_dtype dt, uint64_t n, uint64_t k, uint64_t seed) {
    size_t es = dt == FEATHER_F32 ? 4 : 2;
    uint8_t *p = malloc((size_t)(n * k) * es);
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (uint64_t i = 0; i < n * k; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        /* heavy-ish tails: a ratio of two uniforms */
        double u = ((double)(s >> 11) + 0.5) / 9007199254740992.0 - 0.5;
        double v = ((double)((s * 0x2545f4914f6cdd1dull) >> 11) + 0.5) / 9007199254740992.0;
        float x = (float)(0.01 * u / (v + 0.05));
        if (dt == FEATHER_F16) ((uint16_t *)p)[i] = feather_f32_to_f16(x);
        else if (dt == FEATHER_BF16) ((uint16_t *)p)[i] = feather_f32_to_bf16(x);
        else ((float *)p)[i] = x;
    }
    return p;
}

/* Same scales as the search, same bytes and statistics as quantize_with on them, in every
 * mode, dtype, format and both layouts. */
TEST(quantize_is_search_then_cast) {
    const uint64_t n = 48, k = 256;
    static const char *modes[] = {"none", "absmax", "tensor", "channel", "block:64"};
    feather_dtype dts[] = {FEATHER_F16, FEATHER_BF16, FEATHER_F32};
    feather_ctx *ctx = feather_ctx_new(2);
    REQUIRE(ctx);
    uint8_t *q1 = malloc(n * k), *q2 = malloc(n * k);
    float s1[1024], s2[1024];
    for (int di = 0; di < 3; di++) {
        void *w = weights(dts[di], n, k, 7 + (uint64_t)di);
        for (int mi = 0; mi < 5; mi++)
            for (int fi = 0; fi < 2; fi++)
                for (int packed = 0; packed < 2; packed++) {
                    feather_quant_options o;
                    memset(&o, 0, sizeof o);
                    o.format = fi ? FEATHER_FP8_E4M3FN : FEATHER_FP8_E5M2;
                    REQUIRE(feather_scale_parse(modes[mi], &o.mode, &o.group, NULL) == FEATHER_OK);
                    uint64_t c = feather_scale_count(&o, n, k);
                    feather_quant_stats st1, st2;
                    memset(q1, 0xaa, n * k);
                    memset(q2, 0x55, n * k);
                    REQUIRE(feather_quantize(ctx, &o, dts[di], w, n, k, packed, q1, s1, &st1,
                                             NULL) == FEATHER_OK);
                    REQUIRE(feather_scale_search(ctx, &o, dts[di], w, n, k, s2, NULL) == FEATHER_OK);
                    REQUIRE(feather_quantize_with(ctx, &o, dts[di], w, n, k, s2, packed, q2, &st2,
                                                  NULL) == FEATHER_OK);
                    CHECK(!memcmp(s1, s2, c * sizeof(float)));
                    CHECK(!memcmp(q1, q2, n * k));
                    CHECK(st1.err_sq == st2.err_sq && st1.sum_sq == st2.sum_sq &&
                          st1.max_abs_err == st2.max_abs_err && st1.nonfinite == st2.nonfinite);
                    /* the search never loses to absmax on the squared error it minimises */
                    if (o.mode == FEATHER_SCALE_TENSOR) {
                        feather_quant_options a = o;
                        a.mode = FEATHER_SCALE_ABSMAX;
                        feather_quant_stats sa;
                        REQUIRE(feather_quantize(ctx, &a, dts[di], w, n, k, packed, q2, s2, &sa,
                                                 NULL) == FEATHER_OK);
                        CHECK(st1.err_sq <= sa.err_sq * (1 + 1e-9));
                    }
                }
        free(w);
    }
    free(q1);
    free(q2);
    feather_ctx_free(ctx);
}

/* The search's errors come back unchanged, and nothing is cast. */
TEST(quantize_reports_search_errors) {
    uint16_t w[64];
    for (int i = 0; i < 64; i++) w[i] = feather_f32_to_f16((float)i / 64);
    w[9] = 0x7e00; /* NaN */
    uint8_t q[64];
    float s[4];
    feather_error e;
    feather_quant_options o;
    memset(&o, 0, sizeof o);
    o.mode = FEATHER_SCALE_CHANNEL;
    o.name = "x.weight";
    memset(q, 0x11, sizeof q);
    CHECK(feather_quantize(NULL, &o, FEATHER_F16, w, 2, 32, 1, q, s, NULL, &e) == FEATHER_E_INVALID);
    CHECK_STR_CONTAINS(e.message, "x.weight");
    CHECK(q[0] == 0x11 && q[63] == 0x11);
    o.mode = FEATHER_SCALE_BLOCK;
    o.group = 24;
    CHECK(feather_quantize(NULL, &o, FEATHER_F16, w, 2, 32, 1, q, s, NULL, &e) == FEATHER_E_ARG);
    o.mode = FEATHER_SCALE_TENSOR;
    o.allow_nonfinite = 1;
    feather_quant_stats st;
    CHECK(feather_quantize(NULL, &o, FEATHER_F16, w, 2, 32, 1, q, s, &st, &e) == FEATHER_OK);
    CHECK_EQ_U(st.nonfinite, 1);
}

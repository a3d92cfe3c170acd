#include "test.h"
#include "feather/feather.h"
#include "internal.h"

TEST(core_exit_codes) {
    CHECK_EQ_U(feather_exit_code(FEATHER_OK), 0);
    CHECK_EQ_U(feather_exit_code(FEATHER_E_MISMATCH), 1);
    CHECK_EQ_U(feather_exit_code(FEATHER_E_INVALID), 2);
    CHECK_EQ_U(feather_exit_code(FEATHER_E_IO), 2);
    CHECK_EQ_U(feather_exit_code(FEATHER_E_ARG), 64);
    CHECK_EQ_U(feather_exit_code(FEATHER_E_CANCELLED), 130);
}

TEST(core_dtype_table) {
    feather_dtype d;
    CHECK(feather_dtype_parse("F8_E5M2", 7, &d) == 0 && d == FEATHER_F8_E5M2);
    CHECK(feather_dtype_parse("f16", 3, &d) == -1);
    CHECK(feather_dtype_parse("F8_E4M3FN", 9, &d) == -1);
    CHECK(feather_dtype_parse("I4", 2, &d) == -1);
    CHECK_EQ_U(feather_dtype_bits(FEATHER_F4), 4);
    CHECK_EQ_U(feather_dtype_bits(FEATHER_F6_E3M2), 6);
    CHECK_EQ_U(feather_dtype_bits(FEATHER_C64), 64);
    for (int i = 0; i < FEATHER_DTYPE_COUNT; i++) {
        const char *n = feather_dtype_name((feather_dtype)i);
        CHECK(feather_dtype_parse(n, strlen(n), &d) == 0 && d == (feather_dtype)i);
    }
}

struct sum_arg { _Atomic unsigned long long total; };
static void add_range(void *arg, size_t b, size_t e, int w) {
    (void)w;
    struct sum_arg *s = arg;
    unsigned long long t = 0;
    for (size_t i = b; i < e; i++) t += i;
    s->total += t;
}

TEST(core_parallel_for_covers_range_once) {
    feather_ctx *ctx = feather_ctx_new(4);
    REQUIRE(ctx);
    for (size_t n = 0; n < 5000; n = n * 3 + 1) {
        struct sum_arg s = {0};
        feather_parallel_for(ctx, n, 7, add_range, &s);
        CHECK_EQ_U(s.total, (unsigned long long)n * (n ? n - 1 : 0) / 2);
    }
    feather_ctx_free(ctx);
}

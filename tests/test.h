/* Minimal test harness: every tests/test_*.c registers its cases with TEST(); one runner
 * (tests/runner.c) runs them all and ends with the line "N passed, N failed". */
#ifndef FEATHER_TEST_H
#define FEATHER_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef void (*test_fn)(void);
void test_register(const char *name, const char *file, test_fn fn);
void test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void test_skip(const char *why);
int test_failed_now(void);
/* Directory with the real checkpoints (../shared/testdata/real by default, FEATHER_TESTDATA). */
const char *test_real_dir(void);
/* A fresh scratch directory for this test (removed at the end unless FEATHER_KEEP_TMP). */
const char *test_tmpdir(void);
/* Path inside test_tmpdir(); the returned buffer is static per call slot (32 slots). */
const char *test_path(const char *name);
/* Directory holding the built programs (FEATHER_BIN, default "build"). */
const char *test_bindir(void);
/* Runs a shell command, returns its exit status (-1 if it did not exit normally). Output goes
 * to the file test_path("cmd.out") which test_cmd_output() returns. */
int test_run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *test_cmd_output(void);

#define TEST(name)                                                                        \
    static void test_##name(void);                                                        \
    __attribute__((constructor)) static void test_reg_##name(void) {                      \
        test_register(#name, __FILE__, test_##name);                                      \
    }                                                                                     \
    static void test_##name(void)

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) test_fail(__FILE__, __LINE__, "check failed: %s", #cond);            \
    } while (0)
#define REQUIRE(cond)                                                                     \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            test_fail(__FILE__, __LINE__, "required: %s", #cond);                         \
            return;                                                                       \
        }                                                                                 \
    } while (0)
#define CHECK_EQ_U(a, b)                                                                  \
    do {                                                                                  \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b);    \
        if (a_ != b_) test_fail(__FILE__, __LINE__, "%s == %s: %llu != %llu", #a, #b, a_, b_); \
    } while (0)
#define CHECK_STR_CONTAINS(hay, needle)                                                   \
    do {                                                                                  \
        const char *h_ = (hay), *n_ = (needle);                                           \
        if (!h_ || !strstr(h_, n_))                                                       \
            test_fail(__FILE__, __LINE__, "'%s' does not contain '%s'", h_ ? h_ : "(null)", n_); \
    } while (0)

#endif

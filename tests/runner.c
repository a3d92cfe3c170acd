/* The one test runner: runs every registered test (or those whose name or file contains one of
 * the arguments), each in order, and ends with "N passed, N failed, N skipped". Exit status 1 if any failed. */
#include "test.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_TESTS 4096
struct test_entry { const char *name, *file; test_fn fn; };
static struct test_entry tests[MAX_TESTS];
static int ntests;
static int cur_failed, cur_skipped;
static char tmpdir[512];

void test_register(const char *name, const char *file, test_fn fn) {
    if (ntests < MAX_TESTS) {
        tests[ntests].name = name;
        tests[ntests].file = file;
        tests[ntests].fn = fn;
        ntests++;
    }
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    if (cur_failed < 10) {
        fprintf(stdout, "    %s:%d: ", file, line);
        va_start(ap, fmt);
        vfprintf(stdout, fmt, ap);
        va_end(ap);
        fputc('\n', stdout);
    } else if (cur_failed == 10) {
        fprintf(stdout, "    (further failures of this test not shown)\n");
    }
    cur_failed++;
}

void test_skip(const char *why) {
    cur_skipped = 1;
    fprintf(stdout, "    SKIP: %s\n", why);
}

int test_failed_now(void) { return cur_failed; }

const char *test_real_dir(void) {
    const char *d = getenv("FEATHER_TESTDATA");
    return d ? d : "../shared/testdata/real";
}

const char *test_bindir(void) {
    const char *d = getenv("FEATHER_BIN");
    return d ? d : "build";
}

const char *test_tmpdir(void) {
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/feather-test-XXXXXX", base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return tmpdir;
}

const char *test_path(const char *name) {
    static char bufs[32][1024];
    static int slot;
    char *b = bufs[slot++ & 31];
    snprintf(b, 1024, "%s/%s", test_tmpdir(), name);
    return b;
}

static char cmd_out[1 << 16];

int test_run(const char *fmt, ...) {
    char cmd[8192], full[9500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    char out[1100];
    snprintf(out, sizeof out, "%s/cmd.out", test_tmpdir());
    snprintf(full, sizeof full, "( %s ) >'%s' 2>&1 </dev/null", cmd, out);
    int st = system(full);
    cmd_out[0] = 0;
    FILE *f = fopen(out, "r");
    if (f) {
        size_t n = fread(cmd_out, 1, sizeof cmd_out - 1, f);
        cmd_out[n] = 0;
        fclose(f);
    }
    if (st == -1 || !WIFEXITED(st)) return -1;
    return WEXITSTATUS(st);
}

const char *test_cmd_output(void) { return cmd_out; }

static void rm_rf(const char *path) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", path);
}

static int selected(const struct test_entry *t, int argc, char **argv) {
    for (int a = 1; a < argc; a++)
        if (strstr(t->name, argv[a]) || strstr(t->file, argv[a])) return 1;
    return argc < 2;
}

int main(int argc, char **argv) {
    int passed = 0, failed = 0, skipped = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 0; i < ntests; i++) {
        if (!selected(&tests[i], argc, argv)) continue;
        cur_failed = 0;
        cur_skipped = 0;
        tmpdir[0] = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        tests[i].fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        const char *st = cur_failed ? "FAIL" : cur_skipped ? "skip" : "ok";
        printf("%-4s %s (%s, %.0f ms)\n", st, tests[i].name, tests[i].file, ms);
        if (cur_failed) failed++;
        else if (cur_skipped) skipped++;
        else passed++;
        if (tmpdir[0] && !getenv("FEATHER_KEEP_TMP")) rm_rf(tmpdir);
    }
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed ? 1 : 0;
}

#include "cli/common.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

const char *cli_prog = "feather";

static void on_signal(int sig) {
    (void)sig;
    feather_cancel();
}

void cli_install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    /* A closed pipe is reported as a write error, not a silent death. */
    signal(SIGPIPE, SIG_IGN);
    /* Past a file-size limit, write() then fails with EFBIG and the output is discarded
     * cleanly, instead of the process being killed mid-write. */
    signal(SIGXFSZ, SIG_IGN);
}

void cli_error(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: ", cli_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int cli_fail(const feather_error *err) {
    cli_error("%s", err->message[0] ? err->message : feather_status_name(err->code));
    return feather_exit_code(err->code);
}

int cli_usage_error(const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s: ", cli_prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry '%s --help'.\n", cli_prog);
    return FEATHER_EXIT_USAGE;
}

int cli_parse_uint(const char *s, unsigned long long max, unsigned long long *out) {
    if (!s || !*s || *s == '-' || *s == '+') return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || v > max) return -1;
    *out = v;
    return 0;
}

void cli_print_version(void) {
    printf("%s %s (library %s, SIMD %s)\n", cli_prog, FEATHER_VERSION_STRING, feather_version(),
           feather_simd_name(feather_simd_detect()));
}

double cli_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int cli_same_inode(const struct stat *a, const struct stat *b) { return a->st_dev == b->st_dev && a->st_ino == b->st_ino; }

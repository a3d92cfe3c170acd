/* Shared by the two programs: option parsing helpers, messages, signals, exit statuses. */
#ifndef FEATHER_CLI_COMMON_H
#define FEATHER_CLI_COMMON_H

#include "feather/feather.h"

#include <stdio.h>

extern const char *cli_prog; /* program name for messages */

/* Installs SIGINT/SIGTERM/SIGHUP handlers that call feather_cancel(). */
void cli_install_signals(void);

/* "prog: message" on stderr, one line. */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints err's message and returns the exit status for its code. */
int cli_fail(const feather_error *err);
/* Usage error: message + "Try 'prog --help'." and returns 64. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parses a non-negative integer option value; returns 0 on success. */
int cli_parse_uint(const char *s, unsigned long long max, unsigned long long *out);

void cli_print_version(void);

/* Seconds on the monotonic clock (progress lines and timings). */
double cli_now_s(void);

struct stat;
/* Whether two stat results are one file (device and inode). */
int cli_same_inode(const struct stat *a, const struct stat *b);

#endif

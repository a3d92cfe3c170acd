/* Status names, error formatting, cancellation and the dtype table. */
#include "internal.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

const char *feather_version(void) { return FEATHER_VERSION_STRING; }

const char *feather_status_name(feather_status s) {
    switch (s) {
    case FEATHER_OK: return "ok";
    case FEATHER_E_INVALID: return "invalid input";
    case FEATHER_E_IO: return "I/O error";
    case FEATHER_E_NOMEM: return "out of memory";
    case FEATHER_E_ARG: return "invalid argument";
    case FEATHER_E_EXISTS: return "output exists";
    case FEATHER_E_UNSUPPORTED: return "unsupported";
    case FEATHER_E_MISMATCH: return "verification failed";
    case FEATHER_E_CANCELLED: return "interrupted";
    case FEATHER_E_NOTHING: return "nothing to convert";
    }
    return "unknown status";
}

int feather_exit_code(feather_status s) {
    switch (s) {
    case FEATHER_OK: return FEATHER_EXIT_OK;
    case FEATHER_E_MISMATCH: return FEATHER_EXIT_VERIFY;
    case FEATHER_E_ARG: return FEATHER_EXIT_USAGE;
    case FEATHER_E_CANCELLED: return FEATHER_EXIT_INTERRUPTED;
    default: return FEATHER_EXIT_INPUT;
    }
}

/* A lock-free atomic int is async-signal-safe to store from a handler. */
static atomic_int cancel_flag;
void feather_cancel(void) { atomic_store_explicit(&cancel_flag, 1, memory_order_relaxed); }
int feather_cancelled(void) { return atomic_load_explicit(&cancel_flag, memory_order_relaxed); }
void feather_cancel_reset(void) { atomic_store(&cancel_flag, 0); }

feather_status feather_fail(feather_error *err, feather_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->code = code;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
        /* One line, always. */
        for (char *p = err->message; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
    }
    return code;
}

feather_status feather_fail_prefix(feather_error *err, feather_status code, const char *fmt, ...) {
    if (err) {
        char prefix[FEATHER_ERROR_MAX], old[FEATHER_ERROR_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(prefix, sizeof prefix, fmt, ap);
        va_end(ap);
        memcpy(old, err->message, sizeof old);
        old[sizeof old - 1] = 0;
        return feather_fail(err, code, "%s: %s", prefix, old);
    }
    return code;
}

feather_status feather_fail_nonfinite(feather_error *err, const char *prefix, uint64_t n, const char *what) {
    return feather_fail(err, FEATHER_E_INVALID, "%s%llu NaN/Inf %s (use --allow-nonfinite to map NaN to 0 and Inf to ±max)",
                        prefix, (unsigned long long)n, what);
}

const char *feather_tensor_prefix(const char *name, char *buf, size_t len) {
    char q[300];
    if (!name) buf[0] = 0;
    else snprintf(buf, len, "tensor '%s': ", feather_quote(name, q, sizeof q));
    return buf;
}

const char *feather_quote(const char *s, char *buf, size_t len) {
    size_t o = 0;
    if (!len) return buf;
    for (; s && *s && o + 5 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f) o += (size_t)snprintf(buf + o, len - o, "\\x%02x", c);
        else buf[o++] = (char)c;
    }
    if (s && *s && o + 4 <= len) { memcpy(buf + o, "...", 3); o += 3; }
    buf[o] = 0;
    return buf;
}

static const struct { const char *name; unsigned bits; } dtypes[FEATHER_DTYPE_COUNT] = {
    [FEATHER_BOOL] = {"BOOL", 8},          [FEATHER_F4] = {"F4", 4},
    [FEATHER_F6_E2M3] = {"F6_E2M3", 6},    [FEATHER_F6_E3M2] = {"F6_E3M2", 6},
    [FEATHER_U8] = {"U8", 8},              [FEATHER_I8] = {"I8", 8},
    [FEATHER_F8_E5M2] = {"F8_E5M2", 8},    [FEATHER_F8_E4M3] = {"F8_E4M3", 8},
    [FEATHER_F8_E8M0] = {"F8_E8M0", 8},    [FEATHER_F8_E4M3FNUZ] = {"F8_E4M3FNUZ", 8},
    [FEATHER_F8_E5M2FNUZ] = {"F8_E5M2FNUZ", 8},
    [FEATHER_I16] = {"I16", 16},           [FEATHER_U16] = {"U16", 16},
    [FEATHER_F16] = {"F16", 16},           [FEATHER_BF16] = {"BF16", 16},
    [FEATHER_I32] = {"I32", 32},           [FEATHER_U32] = {"U32", 32},
    [FEATHER_F32] = {"F32", 32},           [FEATHER_C64] = {"C64", 64},
    [FEATHER_F64] = {"F64", 64},           [FEATHER_I64] = {"I64", 64},
    [FEATHER_U64] = {"U64", 64},
};

const char *feather_dtype_name(feather_dtype d) {
    return (unsigned)d < FEATHER_DTYPE_COUNT ? dtypes[d].name : "?";
}
unsigned feather_dtype_bits(feather_dtype d) {
    return (unsigned)d < FEATHER_DTYPE_COUNT ? dtypes[d].bits : 0;
}
int feather_dtype_parse(const char *s, size_t len, feather_dtype *out) {
    /* Case-sensitive and exact, like the reference: " F16" or "f16" are unknown. */
    for (int i = 0; i < FEATHER_DTYPE_COUNT; i++) {
        if (strlen(dtypes[i].name) == len && memcmp(dtypes[i].name, s, len) == 0) {
            *out = (feather_dtype)i;
            return 0;
        }
    }
    return -1;
}

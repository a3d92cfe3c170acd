/* Compact JSON output for the writer's header. The escaping matches serde_json, the
 * serializer of the reference safetensors writer, so equal inputs give equal bytes. */
#include "json_write.h"

#include <stdlib.h>
#include <string.h>

static int reserve(feather_jw *b, size_t n) {
    if (b->over || b->nomem) return 0;
    if (n > b->limit - b->len || b->len > b->limit) {
        b->over = 1;
        return 0;
    }
    if (b->len + n <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n) cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->nomem = 1;
        return 0;
    }
    b->p = p;
    b->cap = cap;
    return 1;
}

void feather_jw_put(feather_jw *b, const char *s, size_t n) {
    if (!n || !reserve(b, n)) return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

void feather_jw_puts(feather_jw *b, const char *s) { feather_jw_put(b, s, strlen(s)); }

void feather_jw_u64(feather_jw *b, uint64_t v) {
    char tmp[24];
    int i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    feather_jw_put(b, tmp + i, sizeof tmp - (size_t)i);
}

void feather_jw_escaped(feather_jw *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    size_t run = 0; /* start of the pending run of bytes that need no escaping */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        feather_jw_put(b, s + run, i - run);
        run = i + 1;
        char e[6] = {'\\', 0};
        size_t el = 2;
        switch (c) {
        case '"': e[1] = '"'; break;
        case '\\': e[1] = '\\'; break;
        case '\b': e[1] = 'b'; break;
        case '\f': e[1] = 'f'; break;
        case '\n': e[1] = 'n'; break;
        case '\r': e[1] = 'r'; break;
        case '\t': e[1] = 't'; break;
        default:
            e[1] = 'u';
            e[2] = '0';
            e[3] = '0';
            e[4] = hex[c >> 4];
            e[5] = hex[c & 15];
            el = 6;
        }
        feather_jw_put(b, e, el);
    }
    feather_jw_put(b, s + run, n - run);
}

int feather_jw_utf8_ok(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c == 0xE0) len = 3, lo = 0xA0;             /* no overlong */
        else if (c == 0xED) len = 3, hi = 0x9F;             /* no surrogates */
        else if (c >= 0xE1 && c <= 0xEF) len = 3;
        else if (c == 0xF0) len = 4, lo = 0x90;             /* no overlong */
        else if (c >= 0xF1 && c <= 0xF3) len = 4;
        else if (c == 0xF4) len = 4, hi = 0x8F;             /* <= U+10FFFF */
        else return 0;
        if (n - i < len) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t k = 2; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += len;
    }
    return 1;
}

/*
 * Strict lexical and grammatical pre-scan of JSON text before cJSON sees it.
 *
 * The reference parses headers with serde_json; cJSON 1.7.15 accepts much more: any byte
 * <= 0x20 (NUL padding included) as whitespace, a leading BOM, raw control bytes in strings,
 * invalid UTF-8, leading zeros ("016"), "-.5", "1." and "\u0000" (which silently truncates a
 * C string). It also turns every number into a double, so 2.0, 2e0, -0 and 2 all look alike
 * and integers above 2^53 lose their value. This scanner rejects what serde_json rejects and
 * records the raw integer literals of every shape and data_offsets array so that header.c can
 * read them exactly.
 */
#include "reader_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Where a value sits: the roles that lead to a recorded array (root object -> tensor entry ->
 * "shape"/"data_offsets" array -> elements). */
enum role { ROLE_ROOT, ROLE_ENTRY, ROLE_DIMS, ROLE_DIM, ROLE_OTHER };

typedef struct scanner {
    const uint8_t *p;
    size_t len, pos;
    const char *name, *what;
    feather_error *err;
    json_scan *out;
    size_t member, field; /* current positions in the root object and in a tensor entry */
} scanner;

static feather_status syntax(scanner *s, size_t at, const char *fmt, ...) FEATHER_PRINTF(3, 4);
static feather_status syntax(scanner *s, size_t at, const char *fmt, ...) {
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return feather_fail(s->err, FEATHER_E_INVALID, "%s: %s is not valid JSON: %s at byte %zu",
                        s->name, s->what, what, at);
}

static feather_status unexpected(scanner *s, const char *expected) {
    char buf[160];
    if (s->pos >= s->len)
        return syntax(s, s->pos, "unexpected end, expected %s", expected);
    uint8_t c = s->p[s->pos];
    if (c < 0x20 || c >= 0x7f)
        snprintf(buf, sizeof buf, "byte 0x%02x where %s was expected", c, expected);
    else
        snprintf(buf, sizeof buf, "'%c' where %s was expected", c, expected);
    return syntax(s, s->pos, "%s", buf);
}

/* Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF), like Rust's
 * str::from_utf8, which the reference runs on the whole header before parsing. */
static size_t utf8_invalid_at(const uint8_t *p, size_t len) {
    size_t i = 0;
    while (i < len) {
        uint8_t c = p[i];
        if (c < 0x80) { i++; continue; }
        size_t n;
        uint8_t lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) n = 1;
        else if (c == 0xe0) { n = 2; lo = 0xa0; }
        else if (c == 0xed) { n = 2; hi = 0x9f; }
        else if (c >= 0xe1 && c <= 0xef) n = 2;
        else if (c == 0xf0) { n = 3; lo = 0x90; }
        else if (c == 0xf4) { n = 3; hi = 0x8f; }
        else if (c >= 0xf1 && c <= 0xf3) n = 3;
        else return i;
        if (len - i <= n) return i;
        if (p[i + 1] < lo || p[i + 1] > hi) return i;
        for (size_t k = 2; k <= n; k++)
            if ((p[i + k] & 0xc0) != 0x80) return i;
        i += n + 1;
    }
    return len;
}

static int is_ws(uint8_t c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static void skip_ws(scanner *s) {
    while (s->pos < s->len && is_ws(s->p[s->pos])) s->pos++;
}

static int hex4(const uint8_t *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    *out = v;
    return 0;
}

/* One \uXXXX escape (with its low surrogate if it is a high one) at s->pos. */
static feather_status scan_unicode_escape(scanner *s, unsigned *cp) {
    size_t at = s->pos;
    unsigned u;
    if (s->len - s->pos < 6 || hex4(s->p + s->pos + 2, &u))
        return syntax(s, at, "invalid \\u escape");
    s->pos += 6;
    if (u == 0)
        return syntax(s, at, "\\u0000 escape (names and metadata are C strings, NUL cannot be held)");
    if (u >= 0xdc00 && u <= 0xdfff) return syntax(s, at, "lone low surrogate escape");
    if (u >= 0xd800 && u <= 0xdbff) {
        unsigned lo;
        if (s->len - s->pos < 6 || s->p[s->pos] != '\\' || s->p[s->pos + 1] != 'u' ||
            hex4(s->p + s->pos + 2, &lo) || lo < 0xdc00 || lo > 0xdfff)
            return syntax(s, at, "lone high surrogate escape");
        s->pos += 6;
        u = 0x10000 + ((u - 0xd800) << 10) + (lo - 0xdc00);
    }
    *cp = u;
    return FEATHER_OK;
}

/* A string at s->pos. When key is not NULL, its decoded bytes are compared with the two field
 * names that lead to recorded arrays (*key: 1 shape, 2 data_offsets, 0 other). */
static feather_status scan_string(scanner *s, int *key) {
    char dec[16];
    size_t nd = 0;
    int fits = 1;
    size_t start = s->pos++;
    for (;;) {
        if (s->pos >= s->len) return syntax(s, start, "unterminated string");
        uint8_t c = s->p[s->pos];
        unsigned cp = c;
        if (c == '"') { s->pos++; break; }
        if (c < 0x20)
            return syntax(s, s->pos, "control byte 0x%02x inside a string (must be escaped)", c);
        if (c == '\\') {
            if (s->pos + 1 >= s->len) return syntax(s, s->pos, "unterminated string");
            switch (s->p[s->pos + 1]) {
            case '"': case '\\': case '/': cp = s->p[s->pos + 1]; s->pos += 2; break;
            case 'b': case 'f': case 'n': case 'r': case 't': cp = 1; s->pos += 2; break;
            case 'u': {
                feather_status st = scan_unicode_escape(s, &cp);
                if (st) return st;
                break;
            }
            default: return syntax(s, s->pos, "invalid escape");
            }
        } else {
            s->pos++;
        }
        /* Only ASCII can match the field names; anything else just spoils the match. */
        if (key) {
            if (cp >= 0x80 || nd == sizeof dec) fits = 0;
            else dec[nd++] = (char)cp;
        }
    }
    if (key) {
        *key = 0;
        if (fits && nd == 5 && !memcmp(dec, "shape", 5)) *key = 1;
        if (fits && nd == 12 && !memcmp(dec, "data_offsets", 12)) *key = 2;
    }
    return FEATHER_OK;
}

static int grow_values(json_scan *o) {
    if (o->nvalues < o->values_cap) return 0;
    size_t n = o->values_cap ? o->values_cap * 2 : 64;
    uint64_t *v = realloc(o->values, n * sizeof *v);
    if (!v) return -1;
    o->values = v;
    json_elem *e = realloc(o->elems, n * sizeof *e);
    if (!e) return -1;
    o->elems = e;
    o->values_cap = n;
    return 0;
}

static int grow_arrays(json_scan *o) {
    if (o->narrays < o->arrays_cap) return 0;
    size_t n = o->arrays_cap ? o->arrays_cap * 2 : 64;
    json_array *a = realloc(o->arrays, n * sizeof *a);
    if (!a) return -1;
    o->arrays = a;
    o->arrays_cap = n;
    return 0;
}

static feather_status record(scanner *s, size_t offset, uint32_t len, json_num_kind kind,
                             uint64_t value) {
    json_scan *o = s->out;
    if (grow_values(o))
        return feather_fail(s->err, FEATHER_E_NOMEM, "%s: out of memory reading the %s",
                            s->name, s->what);
    o->values[o->nvalues] = value;
    o->elems[o->nvalues] = (json_elem){.offset = offset, .len = len, .kind = (uint8_t)kind};
    o->nvalues++;
    o->arrays[o->narrays - 1].count++;
    return FEATHER_OK;
}

static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static feather_status scan_number(scanner *s, enum role role) {
    size_t start = s->pos;
    int neg = 0, frac = 0;
    if (s->p[s->pos] == '-') { neg = 1; s->pos++; }
    if (s->pos >= s->len || !is_digit(s->p[s->pos])) return syntax(s, start, "invalid number");
    if (s->p[s->pos] == '0') {
        s->pos++;
        if (s->pos < s->len && is_digit(s->p[s->pos]))
            return syntax(s, start, "number with a leading zero");
    } else {
        while (s->pos < s->len && is_digit(s->p[s->pos])) s->pos++;
    }
    if (s->pos < s->len && s->p[s->pos] == '.') {
        frac = 1;
        s->pos++;
        if (s->pos >= s->len || !is_digit(s->p[s->pos])) return syntax(s, start, "invalid number");
        while (s->pos < s->len && is_digit(s->p[s->pos])) s->pos++;
    }
    if (s->pos < s->len && (s->p[s->pos] == 'e' || s->p[s->pos] == 'E')) {
        frac = 1;
        s->pos++;
        if (s->pos < s->len && (s->p[s->pos] == '+' || s->p[s->pos] == '-')) s->pos++;
        if (s->pos >= s->len || !is_digit(s->p[s->pos])) return syntax(s, start, "invalid number");
        while (s->pos < s->len && is_digit(s->p[s->pos])) s->pos++;
    }
    size_t n = s->pos - start;
    if (n > 63) return syntax(s, start, "number longer than 63 characters (not supported)");
    if (role != ROLE_DIM) return FEATHER_OK;
    uint64_t v = 0;
    json_num_kind kind = neg ? JSON_NEGATIVE : frac ? JSON_FRACTION : JSON_UINT;
    for (size_t i = start; kind == JSON_UINT && i < s->pos; i++) {
        unsigned d = s->p[i] - '0';
        if (v > (UINT64_MAX - d) / 10) kind = JSON_TOO_BIG;
        else v = v * 10 + d;
    }
    return record(s, start, (uint32_t)n, kind, kind == JSON_UINT ? v : 0);
}

static feather_status scan_literal(scanner *s) {
    static const char *const lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(lits[i]);
        if (s->len - s->pos >= n && !memcmp(s->p + s->pos, lits[i], n)) {
            s->pos += n;
            return FEATHER_OK;
        }
    }
    return unexpected(s, "a value");
}

static feather_status scan_value(scanner *s, unsigned depth, enum role role);

static feather_status scan_object(scanner *s, unsigned depth, enum role role) {
    s->pos++; /* '{' */
    skip_ws(s);
    if (s->pos < s->len && s->p[s->pos] == '}') { s->pos++; return FEATHER_OK; }
    for (size_t i = 0;; i++) {
        int key = 0;
        if (s->pos >= s->len || s->p[s->pos] != '"') return unexpected(s, "a string key");
        feather_status st = scan_string(s, role == ROLE_ENTRY ? &key : NULL);
        if (st) return st;
        skip_ws(s);
        if (s->pos >= s->len || s->p[s->pos] != ':') return unexpected(s, "':'");
        s->pos++;
        enum role child = ROLE_OTHER;
        if (role == ROLE_ROOT) { s->member = i; child = ROLE_ENTRY; }
        if (role == ROLE_ENTRY) { s->field = i; child = key ? ROLE_DIMS : ROLE_OTHER; }
        if ((st = scan_value(s, depth, child))) return st;
        skip_ws(s);
        if (s->pos < s->len && s->p[s->pos] == ',') { s->pos++; skip_ws(s); continue; }
        if (s->pos < s->len && s->p[s->pos] == '}') { s->pos++; return FEATHER_OK; }
        return unexpected(s, "',' or '}'");
    }
}

static feather_status scan_array(scanner *s, unsigned depth, enum role role) {
    enum role child = ROLE_OTHER;
    if (role == ROLE_DIMS) {
        json_scan *o = s->out;
        if (grow_arrays(o))
            return feather_fail(s->err, FEATHER_E_NOMEM, "%s: out of memory reading the %s",
                                s->name, s->what);
        o->arrays[o->narrays++] =
            (json_array){.member = s->member, .field = s->field, .first = o->nvalues};
        child = ROLE_DIM;
    }
    s->pos++; /* '[' */
    skip_ws(s);
    if (s->pos < s->len && s->p[s->pos] == ']') { s->pos++; return FEATHER_OK; }
    for (;;) {
        feather_status st = scan_value(s, depth, child);
        if (st) return st;
        skip_ws(s);
        if (s->pos < s->len && s->p[s->pos] == ',') { s->pos++; skip_ws(s); continue; }
        if (s->pos < s->len && s->p[s->pos] == ']') { s->pos++; return FEATHER_OK; }
        return unexpected(s, "',' or ']'");
    }
}

/* A value at s->pos (whitespace already skipped); depth counts the containers around it. */
static feather_status scan_value(scanner *s, unsigned depth, enum role role) {
    skip_ws(s);
    if (s->pos >= s->len) return unexpected(s, "a value");
    uint8_t c = s->p[s->pos];
    if (role == ROLE_DIM && c != '-' && !is_digit(c)) {
        feather_status st = record(s, s->pos, 0, JSON_NOT_NUMBER, 0);
        if (st) return st;
    }
    if (c == '{' || c == '[') {
        if (depth >= JSON_MAX_DEPTH)
            return syntax(s, s->pos, "nesting deeper than %d levels", JSON_MAX_DEPTH);
        return c == '{' ? scan_object(s, depth + 1, role) : scan_array(s, depth + 1, role);
    }
    if (c == '"') return scan_string(s, NULL);
    if (c == '-' || is_digit(c)) return scan_number(s, role);
    return scan_literal(s);
}

feather_status json_scan_run(json_scan *s, const uint8_t *text, size_t len, const char *name,
                             const char *what, feather_error *err) {
    memset(s, 0, sizeof *s);
    size_t bad = utf8_invalid_at(text, len);
    if (bad < len)
        return feather_fail(err, FEATHER_E_INVALID,
                            "%s: %s is not valid UTF-8 (byte 0x%02x at byte %zu)", name, what,
                            text[bad], bad);
    if (len >= 3 && text[0] == 0xef && text[1] == 0xbb && text[2] == 0xbf)
        return feather_fail(err, FEATHER_E_INVALID,
                            "%s: %s starts with a UTF-8 byte order mark (not allowed in JSON)",
                            name, what);
    /* Never NULL, so that an empty shape still points somewhere valid. */
    if (grow_values(s))
        return feather_fail(err, FEATHER_E_NOMEM, "%s: out of memory reading the %s", name, what);
    scanner sc = {.p = text, .len = len, .name = name, .what = what, .err = err, .out = s};
    skip_ws(&sc);
    feather_status st = scan_value(&sc, 0, ROLE_ROOT);
    if (st) return st;
    skip_ws(&sc);
    if (sc.pos < len) {
        return syntax(&sc, sc.pos,
                      "byte 0x%02x after the JSON value (only space, tab, LF and CR may pad it)",
                      text[sc.pos]);
    }
    return FEATHER_OK;
}

void json_scan_free(json_scan *s) {
    free(s->arrays);
    free(s->values);
    free(s->elems);
    memset(s, 0, sizeof *s);
}

const json_array *json_scan_find(const json_scan *s, size_t member, size_t field) {
    /* Arrays are recorded in document order, hence sorted by (member, field). */
    size_t lo = 0, hi = s->narrays;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const json_array *a = &s->arrays[mid];
        if (a->member < member || (a->member == member && a->field < field)) lo = mid + 1;
        else hi = mid;
    }
    if (lo < s->narrays && s->arrays[lo].member == member && s->arrays[lo].field == field)
        return &s->arrays[lo];
    return NULL;
}

/* Building compact JSON text into a growable buffer. Private to the library. */
#ifndef FEATHER_JSON_WRITE_H
#define FEATHER_JSON_WRITE_H

#include <stddef.h>
#include <stdint.h>

/* A buffer that stops growing past 'limit' bytes (sets 'over') or when memory runs out
 * (sets 'nomem'); appends after that are ignored, so callers check once at the end. */
typedef struct feather_jw {
    char *p;
    size_t len, cap, limit;
    int over, nomem;
} feather_jw;

void feather_jw_put(feather_jw *b, const char *s, size_t n);
void feather_jw_puts(feather_jw *b, const char *s);
void feather_jw_u64(feather_jw *b, uint64_t v);
/* String contents (no surrounding quotes) escaped the way serde_json does: \" \\ \b \f \n \r
 * \t, other control bytes as \u00xx; everything else, UTF-8 included, as is. */
void feather_jw_escaped(feather_jw *b, const char *s, size_t n);

/* Well-formed UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF). */
int feather_jw_utf8_ok(const char *s, size_t n);

#endif

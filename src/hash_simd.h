/* Internal: XXH3 compiled for wider vectors. libxxhash is built for the baseline CPU (SSE2 on
 * x86-64); the same header-only code inlined into hash_avx2.c and hash_avx512.c runs about
 * 1.5× faster on data streamed from memory and up to 3× on data in cache. Digests are XXH3's
 * whichever code computes them. hash.c picks one at first use. */
#ifndef FEATHER_HASH_SIMD_H
#define FEATHER_HASH_SIMD_H

#include <stddef.h>
#include <stdint.h>

typedef struct feather_xxh3_impl {
    uint64_t (*hash)(const void *data, size_t len);
    void *(*stream_new)(void); /* a reset state, or NULL when out of memory */
    void (*stream_update)(void *state, const void *data, size_t len);
    uint64_t (*stream_digest)(void *state);
    void (*stream_free)(void *state); /* NULL is fine */
} feather_xxh3_impl;

void feather_xxh3_avx2(feather_xxh3_impl *impl);
void feather_xxh3_avx512(feather_xxh3_impl *impl);

/* The body of hash_avx2.c and hash_avx512.c, after #define XXH_INLINE_ALL, <xxhash.h> and
 * <immintrin.h>. XXH3's long-input path returns with the upper halves of the vector registers
 * in use (no vzeroupper); SSE code running after that (libm's log and cos, for one) is then ten
 * times slower on recent Intel cores, so every entry point clears them on the way out. */
#define FEATHER_XXH3_IMPL(name)                                                                   \
    static uint64_t one_shot(const void *data, size_t len) {                                      \
        uint64_t h = XXH3_64bits(data, len);                                                      \
        _mm256_zeroupper();                                                                       \
        return h;                                                                                 \
    }                                                                                             \
    static void *stream_new(void) {                                                               \
        XXH3_state_t *s = XXH3_createState();                                                     \
        if (s) XXH3_64bits_reset(s);                                                              \
        return s;                                                                                 \
    }                                                                                             \
    static void stream_update(void *s, const void *data, size_t len) {                            \
        XXH3_64bits_update((XXH3_state_t *)s, data, len);                                         \
        _mm256_zeroupper();                                                                       \
    }                                                                                             \
    static uint64_t stream_digest(void *s) {                                                      \
        uint64_t h = XXH3_64bits_digest((XXH3_state_t *)s);                                       \
        _mm256_zeroupper();                                                                       \
        return h;                                                                                 \
    }                                                                                             \
    static void stream_free(void *s) { XXH3_freeState((XXH3_state_t *)s); }                      \
    void name(feather_xxh3_impl *impl) {                                                          \
        impl->hash = one_shot;                                                                    \
        impl->stream_new = stream_new;                                                            \
        impl->stream_update = stream_update;                                                      \
        impl->stream_digest = stream_digest;                                                      \
        impl->stream_free = stream_free;                                                          \
    }

#endif

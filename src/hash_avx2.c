/* XXH3 inlined with AVX2 (see hash_simd.h). */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <immintrin.h>

#include "hash_simd.h"

FEATHER_XXH3_IMPL(feather_xxh3_avx2)

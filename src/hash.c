/* The content hash recorded by the writer and checked by the reader: XXH3-64, seed 0. */
#include "internal.h"

#include <xxhash.h>

uint64_t feather_hash(const void *data, size_t len) { return XXH3_64bits(data, len); }

/* Kernels of the (K/16, N, 16) layout conversion (pack.c, pack_avx2.c). Not installed. */
#ifndef FEATHER_PACK_KERNELS_H
#define FEATHER_PACK_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* Rows i = 0..3 of a plain (·, k) byte matrix starting at src, columns [0, n) (n % 64 == 0),
 * to the packed lines dst + p·step (piece p of the 4 rows, 64 bytes), and back. nt: streaming
 * stores; every destination line (pack) or row segment (unpack) must then be 64-byte
 * aligned, and the caller issues feather_stream_fence() after the batch. AVX2 only. */
void feather_pack4_avx2(const uint8_t *src, size_t k, size_t n, uint8_t *dst, size_t step, int nt);
void feather_unpack4_avx2(const uint8_t *src, size_t step, size_t n, uint8_t *dst, size_t k, int nt);

#endif

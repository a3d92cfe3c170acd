/* Internal: 16×16 byte transpose with SSE2 unpacks, shared by the SIMD matrix-product kernels.
 * The packed weight stores, per kb, 16-byte records of 16 k values for each column; the
 * kernels want for each k the 16 columns side by side, so each 256-byte group of 16 records
 * is transposed. */
#ifndef FEATHER_GEMM_CPU_TRANSPOSE_H
#define FEATHER_GEMM_CPU_TRANSPOSE_H

#include <emmintrin.h>

/* out[i] byte c = in[c] byte i. */
static inline void gemm_transpose16x16(const __m128i in[16], __m128i out[16]) {
    __m128i l1[8], h1[8], x2[4][4], x3[8][2];
    for (int q = 0; q < 8; q++) { /* 16-bit units: rows 2q, 2q+1 at byte i (lo: i<8) */
        l1[q] = _mm_unpacklo_epi8(in[2 * q], in[2 * q + 1]);
        h1[q] = _mm_unpackhi_epi8(in[2 * q], in[2 * q + 1]);
    }
    for (int q = 0; q < 4; q++) { /* 32-bit units: rows 4q…4q+3, i in groups of 4 */
        x2[0][q] = _mm_unpacklo_epi16(l1[2 * q], l1[2 * q + 1]);
        x2[1][q] = _mm_unpackhi_epi16(l1[2 * q], l1[2 * q + 1]);
        x2[2][q] = _mm_unpacklo_epi16(h1[2 * q], h1[2 * q + 1]);
        x2[3][q] = _mm_unpackhi_epi16(h1[2 * q], h1[2 * q + 1]);
    }
    for (int g = 0; g < 4; g++) /* 64-bit units: rows 8h…8h+7, i in pairs */
        for (int h = 0; h < 2; h++) {
            x3[2 * g][h] = _mm_unpacklo_epi32(x2[g][2 * h], x2[g][2 * h + 1]);
            x3[2 * g + 1][h] = _mm_unpackhi_epi32(x2[g][2 * h], x2[g][2 * h + 1]);
        }
    for (int p = 0; p < 8; p++) {
        out[2 * p] = _mm_unpacklo_epi64(x3[p][0], x3[p][1]);
        out[2 * p + 1] = _mm_unpackhi_epi64(x3[p][0], x3[p][1]);
    }
}

/* Loads the records of columns c0 … c0+15 of one kb (valid of them present, the rest 0). */
static inline void gemm_load_records(const uint8_t *rec, unsigned valid, __m128i in[16]) {
    for (unsigned c = 0; c < 16; c++)
        in[c] = c < valid ? _mm_loadu_si128((const __m128i *)(rec + c * 16)) : _mm_setzero_si128();
}

#endif

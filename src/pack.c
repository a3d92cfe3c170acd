/* The (K/16, N, 16) prepacked layout: packed[kb][n][i] = Q[n][16·kb + i].
 *
 * Packing moves whole 16-byte pieces (one row's 16 consecutive K values), so it is a transpose
 * of an (N, K/16) matrix of 16-byte elements. With AVX2 it moves 4 rows at once, so that
 * each packed 64-byte line (the 4 rows' pieces of one slab) is read or written whole, large
 * layouts with streaming stores (see walk() for the order). Without AVX2, 16-byte memcpy. */
#include "internal.h"
#include "feather/quant.h"
#include "pack_kernels.h"
#include "quant_kernels.h"

#include <string.h>

#define STRIP_ROWS 16
#define CHUNK 256

static void pack_rows(const uint8_t *plain, uint64_t n, uint64_t k, uint8_t *packed,
                      uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1) {
    for (uint64_t c = c0; c < c1; c += 16) {
        uint8_t *dst = packed + (c / 16) * 16 * n;
        for (uint64_t r = r0; r < r1; r++) memcpy(dst + 16 * r, plain + r * k + c, 16);
    }
}

static void unpack_rows(const uint8_t *packed, uint64_t n, uint64_t k, uint8_t *plain,
                        uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1) {
    for (uint64_t r = r0; r < r1; r++)
        for (uint64_t c = c0; c < c1; c += 16) memcpy(plain + r * k + c, packed + (c / 16) * 16 * n + 16 * r, 16);
}

/* Rows [r0, r1): from the first row ≡ phase (mod 4) on, by 4 through the AVX2 kernels over
 * columns [c0, c1) (multiples of 64), the rest piece by piece. */
static void block(const uint8_t *a, uint64_t n, uint64_t k, uint8_t *b, int to_packed, int nt,
                  uint64_t phase, uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1) {
    uint64_t ra = r0 + (phase + 4 - r0 % 4) % 4;
    if (ra > r1) ra = r1;
    uint64_t rq = ra + (r1 - ra) / 4 * 4;
    if (to_packed) {
        pack_rows(a, n, k, b, r0, ra, c0, c1);
        for (uint64_t r = ra; r < rq; r += 4)
            feather_pack4_avx2(a + r * k + c0, k, c1 - c0, b + (c0 / 16) * 16 * n + 16 * r, 16 * n, nt);
        pack_rows(a, n, k, b, rq, r1, c0, c1);
    } else {
        unpack_rows(a, n, k, b, r0, ra, c0, c1);
        for (uint64_t r = ra; r < rq; r += 4)
            feather_unpack4_avx2(a + (c0 / 16) * 16 * n + 16 * r, 16 * n, c1 - c0, b + r * k + c0, k, nt);
        unpack_rows(a, n, k, b, rq, r1, c0, c1);
    }
}

/* Packing reads rows and writes slabs: strips of 16 rows, each walked 256 columns at a time,
 * keep 16 row streams sequential while the slab writes go out as whole lines. Unpacking reads
 * slabs: 256 columns (16 slab streams) over all rows, then the next 256; its row writes are
 * whole lines too, starting at column cs (so that they are aligned). */
static void walk(const uint8_t *a, uint64_t n, uint64_t k, uint8_t *b, int to_packed, int simd,
                 int nt, uint64_t phase, uint64_t cs) {
    uint64_t ce = simd && k >= cs ? cs + (k - cs) / 64 * 64 : cs; /* 4-row part: [cs, ce) */
    if (to_packed) {
        for (uint64_t r0 = 0; r0 < n;) {
            uint64_t r1 = (r0 ? r0 : phase) + STRIP_ROWS;
            if (r1 > n) r1 = n;
            for (uint64_t c = cs; c < ce; c += CHUNK)
                block(a, n, k, b, 1, nt, phase, r0, r1, c, c + CHUNK < ce ? c + CHUNK : ce);
            pack_rows(a, n, k, b, r0, r1, 0, cs < k ? cs : k);
            pack_rows(a, n, k, b, r0, r1, ce, k);
            r0 = r1;
        }
    } else {
        for (uint64_t c = cs; c < ce; c += CHUNK) block(a, n, k, b, 0, nt, 0, 0, n, c, c + CHUNK < ce ? c + CHUNK : ce);
        unpack_rows(a, n, k, b, 0, n, 0, cs < k ? cs : k);
        unpack_rows(a, n, k, b, 0, n, ce, k);
    }
    if (nt) feather_stream_fence();
}

void feather_pack(const uint8_t *plain, uint64_t n, uint64_t k, uint8_t *packed) {
    int simd = feather_simd_detect() >= FEATHER_SIMD_AVX2;
    int nt = simd && n * k >= FEATHER_STREAM_MIN && n % 4 == 0 && (uintptr_t)packed % 16 == 0;
    /* a packed line holds rows r … r+3 of a slab: with packed at 16 (mod 64), the aligned
     * lines start at rows 3, 7, … */
    walk(plain, n, k, packed, 1, simd, nt, nt ? (64 - (uintptr_t)packed % 64) % 64 / 16 : 0, 0);
}

void feather_unpack(const uint8_t *packed, uint64_t n, uint64_t k, uint8_t *plain) {
    int simd = feather_simd_detect() >= FEATHER_SIMD_AVX2;
    int nt = simd && n * k >= FEATHER_STREAM_MIN && k % 64 == 0 && (uintptr_t)plain % 16 == 0;
    /* every row then has the same alignment: start the whole lines at the first aligned column */
    walk(packed, n, k, plain, 0, simd, nt, 0, nt ? (64 - (uintptr_t)plain % 64) % 64 : 0);
}

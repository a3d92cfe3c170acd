/* The (K/16, N, 16) prepacked layout: packed[kb][n][i] = Q[n][16·kb + i].
 *
 * Packing moves whole 16-byte pieces (one row's 16 consecutive K values), so it is a transpose
 * of an (N, K/16) matrix of 16-byte elements. It is done in tiles of TILE × TILE pieces (4 KiB
 * each way, L1-resident) so both sides are touched in runs of whole cache lines. */
#include "internal.h"
#include "feather/quant.h"

#include <string.h>

#define TILE 16

void feather_pack(const uint8_t *plain, uint64_t n, uint64_t k, uint8_t *packed) {
    uint64_t nb = k / 16;
    for (uint64_t r0 = 0; r0 < n; r0 += TILE) {
        uint64_t r1 = r0 + TILE < n ? r0 + TILE : n;
        for (uint64_t b0 = 0; b0 < nb; b0 += TILE) {
            uint64_t b1 = b0 + TILE < nb ? b0 + TILE : nb;
            for (uint64_t b = b0; b < b1; b++) {
                uint8_t *dst = packed + b * 16 * n;
                for (uint64_t r = r0; r < r1; r++) memcpy(dst + 16 * r, plain + r * k + 16 * b, 16);
            }
        }
    }
}

void feather_unpack(const uint8_t *packed, uint64_t n, uint64_t k, uint8_t *plain) {
    uint64_t nb = k / 16;
    for (uint64_t r0 = 0; r0 < n; r0 += TILE) {
        uint64_t r1 = r0 + TILE < n ? r0 + TILE : n;
        for (uint64_t b0 = 0; b0 < nb; b0 += TILE) {
            uint64_t b1 = b0 + TILE < nb ? b0 + TILE : nb;
            for (uint64_t r = r0; r < r1; r++) {
                uint8_t *dst = plain + r * k;
                for (uint64_t b = b0; b < b1; b++) memcpy(dst + 16 * b, packed + b * 16 * n + 16 * r, 16);
            }
        }
    }
}

/* The choice of matrix-product kernel on Hopper (kernels/pick_hd.h), run here on the CPU for an
 * H100's 132 multiprocessors: at each point below the kernel it takes is the one that measured
 * fastest of those timed there (or within the measurements' spread of it), as BENCHMARKS.md and
 * the comments in pick_hd.h record. A change of the rules that moves one of these points needs
 * new measurements, not a new table. */
#include "test.h"

#include "../kernels/pick_hd.h"

#include <stdio.h>

TEST(gemm_pick_hopper_takes_the_measured_kernels) {
    /* M, N, K, block scales (in units of the current group, FK_SCALE_BLOCK_RS) or tensor, kernel */
    static const struct {
        long long m, n, k;
        int block, want;
    } points[] = {
        /* whole 192-row tiles where they fill the GPU (the sustained-load table) */
        {1024, 3072, 3072, 0, FK_VARIANT_WS192},
        {1024, 3072, 3072, 1, FK_VARIANT_WS192},
        {1024, 3072, 12288, 0, FK_VARIANT_WS192},
        {1024, 3072, 12288, 1, FK_VARIANT_WS192},
        {896, 3072, 12288, 0, FK_VARIANT_WS192},
        {512, 5120, 5120, 0, FK_VARIANT_WS192},
        /* whole 128 × 256 tiles */
        {1024, 8192, 8192, 0, FK_VARIANT_WS256},
        {1024, 8192, 8192, 1, FK_VARIANT_WS256},
        {1024, 12288, 3072, 0, FK_VARIANT_WS256},
        {640, 5120, 13824, 0, FK_VARIANT_WS256},
        /* …but with tensor scales only where their waves take less than 1/1.3 of the 192 × 128
         * tiles' */
        {1536, 14336, 4096, 0, FK_VARIANT_WS192},
        {1600, 18432, 3072, 0, FK_VARIANT_WS192},
        {2688, 28672, 8192, 0, FK_VARIANT_WS192},
        {1536, 13824, 5120, 1, FK_VARIANT_WS256},
        /* stream-K over 128 × 256 tiles: a long K, a last wave at most half full, or 5/8 where
         * K > 8192 */
        {512, 3072, 12288, 0, FK_VARIANT_SK256},
        {768, 3072, 12288, 0, FK_VARIANT_SK256},
        {768, 3072, 12288, 1, FK_VARIANT_SK256},
        {512, 5120, 13824, 0, FK_VARIANT_SK256},
        {1280, 5120, 13824, 0, FK_VARIANT_SK256},
        /* …but not with a last row of 256-row tiles at most half full where K ≤ 8192 (unless
         * whole 256-row tiles are the alternative), nor, with block scales and K > 5120,
         * where those tiles make one to two waves */
        {640, 13824, 5120, 0, FK_VARIANT_WS192},
        {896, 5120, 5120, 0, FK_VARIANT_SK128},
        {576, 8192, 8192, 0, FK_VARIANT_WS192},
        {832, 2048, 8192, 0, FK_VARIANT_WS128},
        {576, 18432, 5120, 1, FK_VARIANT_WS192},
        {832, 4608, 5120, 1, FK_VARIANT_WS128},
        {1600, 3072, 12288, 0, FK_VARIANT_SK256},
        {2688, 3584, 8192, 0, FK_VARIANT_SK256},
        {2112, 2048, 8192, 1, FK_VARIANT_SK256},
        /* …nor where whole 128-row tiles fill one wave to 85 % or more */
        {640, 3072, 12288, 0, FK_VARIANT_WS128},
        {640, 3072, 12288, 1, FK_VARIANT_WS128},
        {576, 3072, 14336, 0, FK_VARIANT_WS128},
        {512, 4096, 14336, 0, FK_VARIANT_WS128},
        {512, 4096, 11008, 1, FK_VARIANT_WS128},
        /* stream-K over 128 × 128 tiles: less than a wave, at most 5/8 of it */
        {384, 3072, 5120, 0, FK_VARIANT_SK128},
        {384, 3072, 5120, 1, FK_VARIANT_SK128},
        {256, 5120, 12288, 0, FK_VARIANT_SK128},
        {256, 5120, 12288, 1, FK_VARIANT_SK128},
        {256, 5120, 5120, 0, FK_VARIANT_SK128},
        {256, 3072, 12288, 0, FK_VARIANT_SK128},
        /* stream-K over 128 × 128 tiles against whole 192-row ones: by fractional waves
         * (tensor scales, M a multiple of 128) */
        {384, 12288, 3072, 0, FK_VARIANT_SK128},
        {512, 9216, 3072, 0, FK_VARIANT_SK128},
        {1152, 4096, 4096, 0, FK_VARIANT_SK128},
        {768, 6144, 4096, 0, FK_VARIANT_SK128},
        {320, 12288, 3072, 0, FK_VARIANT_WS192},
        {448, 9216, 3072, 0, FK_VARIANT_WS192},
        {1088, 4096, 4096, 0, FK_VARIANT_WS192},
        /* …and with checked block scales, whose stream-K kernel keeps two sets without a
         * drain per group */
        {384, 12288, 3072, 1, FK_VARIANT_SK128},
        {1152, 4096, 4096, 1, FK_VARIANT_SK128},
        {384, 12288, 12288, 1, FK_VARIANT_SK128},
        {256, 18432, 14336, 1, FK_VARIANT_SK128},
        {2176, 2048, 4096, 1, FK_VARIANT_SK128},
        /* …and where they make less than a wave with checked block scales, K ≥ 3072 and whole
         * rows of tiles; not with a half-empty last row or K = 2048 */
        {384, 3072, 3072, 1, FK_VARIANT_SK128},
        {256, 4608, 3072, 1, FK_VARIANT_SK128},
        {256, 4608, 4096, 1, FK_VARIANT_SK128},
        {448, 2560, 3072, 1, FK_VARIANT_WS128},
        {256, 5120, 2048, 1, FK_VARIANT_WS128},
        /* whole 128 × 128 tiles: 84 of them or more */
        {384, 3584, 3072, 0, FK_VARIANT_WS128},
        {384, 4608, 3072, 0, FK_VARIANT_WS128},
        {512, 3072, 3072, 0, FK_VARIANT_WS128},
        {512, 3072, 3072, 1, FK_VARIANT_WS128},
        /* 64 rows of A */
        {256, 3072, 3072, 1, FK_VARIANT_WS64},
        {64, 3072, 12288, 0, FK_VARIANT_SK64},
    };
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++) {
        const int got = fk_pick_hopper(points[i].m, points[i].n, points[i].k, points[i].block, points[i].block, 132);
        if (got != points[i].want)
            test_fail(__FILE__, __LINE__, "M=%lld N=%lld K=%lld %s: picks %s, measured fastest %s", points[i].m,
                      points[i].n, points[i].k, points[i].block ? "block:128" : "tensor", fk_variant_name(got),
                      fk_variant_name(points[i].want));
    }
}

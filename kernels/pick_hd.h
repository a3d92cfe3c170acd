/* The choice of kernel on Hopper (compute capability 9.0, sm_90a) above M = 32, as a function of
 * the shape, the scales (block: block scales; rescale: checked ones, FK_SCALE_BLOCK_RS) and the
 * multiprocessor count alone: fk_gemm_pick (gemm.hip) calls it with the device's count, and
 * tests/test_gemm_pick.c holds it on the CPU to the choices measured on the H100 (132 SMs)
 * that the comments below cite. */
#ifndef FK_PICK_HD_H
#define FK_PICK_HD_H

#include "fk_api.h"
#include "fk_hd.h"

FK_HD int fk_pick_hopper(long long m, long long n, long long k, int block, int rescale, long long sms) {
    /* Hopper above M = 32: the warp-specialised wgmma kernels, whole tiles or stream-K
     * (H100 measurements at M = 48…4096: as fast as or faster than the tiled kernels and the
     * cp.async wgmma kernels, since removed, at every benchmarked shape) */
    if (m < 256) {
        /* Stream-K where whole tiles (of 64 rows of A up to M = 64, else 128) would leave
         * a third of the multiprocessors or more idle, with 64-row tiles where the weight
         * is small enough to be read twice (H100, M = 48…192: 3072×12288 at M = 64
         * 63.0 → 27.3 µs, 3072×3072 19.4 → 15.3, 8192×8192 44.3 → 37.2; at M = 128
         * 3072×12288 63 → 30.8 with 128 rows, 34.8 with 64; block:128 against the whole
         * tiles or the tiled kernel picked before: 3072×12288 M = 64 57.9 → 28.1, M = 128
         * 84.4 → 34.7, 8192² M = 64 50.3 → 38.0, 3072² M = 128 20.9 → 17.2); else whole
         * tiles */
        const long long t = ((n + 127) / 128) * ((m + (m <= 64 ? 63 : 127)) / (m <= 64 ? 64 : 128));
        if (3 * t < 2 * sms) return m <= 64 || n * k <= (16ll << 20) ? FK_VARIANT_SK64 : FK_VARIANT_SK128;
        if (m <= 64 && !block) return FK_VARIANT_WS64;
    }
    /* Stream-K where the 128×128 tiles make few waves and the last one is less than half
     * full: H100, 192 tiles on 132 SMs (N = 3072, M = 1024) 1.17× ws128 with K = 3072 and
     * 1.21× with K = 12288; elsewhere between 1.5 % faster and 4 % slower, 1–3 % slower at
     * 12288×3072 M = 4096 (23 waves, the last 27 % full). With block scales against the
     * whole tiles picked before: 3072×12288 M = 256 73.2 → 51.8 µs, M = 1024 188.9 →
     * 171.0, 3072² M = 1024 50.8 → 47.4; but where K and M are both short it lost
     * (12288×3072 M = 192 52.3 → 57.2, 3072² M = 256 21.0 → 21.7), so not there.
     * Where the tiles make less than one wave, up to 5/8 of it: against ws128, back to back
     * (tensor; block:128), 72 tiles 4608×3072 M = 256 22.3 → 20.8 (27.8 → 25.1; with block
     * scales taken where they are checked, below) and 3072×5120 M = 384 34.4 → 28.2 (42.7 →
     * 34.7), 80 tiles 5120² M = 256 33.2 → 31.5 (43.9 → 39.1) and 5120×12288 M = 256 76.2 →
     * 63.0 (99.2 → 78.3); but 84 tiles 3584×3072 M = 384 22.4 → 24.6, 96 4096² M = 384 28.4
     * → 30.0, 108 and 120 1.10–1.19× slower (4608×3072 and 5120² at M = 384). */
    const long long tiles = ((n + 127) / 128) * ((m + 127) / 128), tail = tiles % sms;
    const long long waves128 = (tiles + sms - 1) / sms;
    const int sk_tail = tiles < 4 * sms && tail && (2 * tail < sms || (tiles < sms && 8 * tail < 5 * sms));
    /* where stream-K over a fraction of a wave of 128 × 128 tiles can win: not with a short K
     * or a half-empty last row of tiles (measured in the two rules that use it, below) */
    const int sk_rows = k >= 3072 && m % 128 == 0;
    /* Three consumer warpgroups (192×128 tiles) where their waves take less time: a wave of
     * them does 1.5× the work of a wave of 128×128 tiles and measured about 1.1× as fast
     * per tile (H100, full waves: 1.06–1.12× at M = 4096); 1.4× ws128 where 128 of them
     * make one wave (N = 3072, M = 1024) against 192 of 128×128. Block scales in units of
     * the current group (FK_SCALE_BLOCK_RS), against ws128: 3072² M = 1024 50.5 → 37.0 µs,
     * 3072×12288 M = 1024 193.7 → 138.3 and M = 4096 647.5 → 593.8, 12288×3072 M = 4096
     * 661.6 → 627.0; 8192² M = 4096 1.5 % slower. */
    if (!block || rescale) {
        const long long waves192 = (((n + 191) / 192) * ((m + 127) / 128) + sms - 1) / sms;
        /* 128 × 256 tiles (two consumer warpgroups of m64n256): a wave of them does 2× the
         * work of a wave of 128 × 128 tiles, so where their waves take the least time. Against
         * 192 × 128 tiles a wave of them takes 1.3× the time with tensor scales (median of 70
         * points at K = 3072–14336 and M = 512–2048, 1.29–1.35× at most of them, H100) and
         * 1.17× with block scales (whose three-warpgroup close costs more; 1.13–1.24×), where
         * the 1.11× measured before at full waves picks the faster of the two at 137 of 140
         * points (1.2: 139), so it stays. With 1.11 tensor scales took ws256 where ws192
         * measured faster, e.g. 14336×4096 M = 1536 317.3 µs against 275.1. Back to back,
         * ws256 → ws192 where the 1.3 moves the pick, tensor, 48 points over 12 shapes and
         * M = 448–4096 (H100, two calls): 1.06× faster in the geometric mean, at most 1 %
         * slower (28672×8192 M = 448 347.9 → 350.7), e.g. 18432×3072 M = 1600 303.8 → 264.9,
         * 28672×8192 M = 2688 2004.9 → 1792.2, 5120×13824 M = 3712 855.1 → 773.3; H200
         * 1.056×, one point slower (8192² M = 1600 326.7 → 356.5); none of the grid
         * points moves. Their
         * stream-K form where a long K meets few of them and a last wave less than half full
         * (3072×12288: M = 512 75.0 → 65.6 µs, M = 2048 233.1 → 211.7; block:128 93.6 →
         * 77.4 and 280.3 → 257.0; not with K = 3072, where it lost to whole 192-row tiles),
         * up to 5/8 full where K > 8192. Against the whole tiles picked otherwise, back to
         * back (tensor; block:128), it wins with 68, 72 and 80 tiles of 132 in the last
         * wave at K = 12288 and 13824 (5120×13824 M = 1280 307.1 → 270.4, 350.6 → 342.7;
         * 3072×12288 M = 768 105.9 → 86.3, 126.5 → 105.1; 5120×13824 M = 512 118.3 → 114.8,
         * 147.9 → 145.3); at K = 5120 it wins with 68 (5120² M = 1280 114.3 → 106.4, 129.9
         * → 126.0) but loses with 80 (5120² M = 512 45.7 → 49.9, 54.1 → 57.2), hence the
         * bound on K; with 96 or 120 it loses (4096×14336 M = 640 121.5 → 143.1, 3072×12288
         * M = 896 105.2 → 112.2, 5120×13824 M = 640 144.7 → 167.6);
         * and after whole waves only where K ≤ 8192 (13824×5120 M = 1024: 230.3 → 207.8,
         * block:128 268.6 → 248.1; but 5120×13824 M = 2048 449.5 → 638.6, presumably
         * because its split tiles' panels, about 100 MB, no longer share L2).
         * Against the kernels picked before, back to back (tensor; block:128): 8192²
         * M = 512 104.5 → 90.6, 128.0 → 104.3; M = 1024 229.7 → 189.6, 266.3 → 212.6;
         * M = 4096 944.0 → 768.9, 1082.9 → 912.2; 12288×3072 M = 1024 114.1 → 109.6,
         * 132.9 → 125.9; 3072² M = 4096 119.1 → 112.0, 133.7 → 127.7. */
        const long long t256 = ((n + 127) / 128) * ((m + 255) / 256), tail256 = t256 % sms;
        const long long waves256 = (t256 + sms - 1) / sms;
        const int few256 = tail256 && (2 * tail256 < sms || (8 * tail256 < 5 * sms && k > 8192));
        /* Not where the 128 × 128 tiles make one wave 85 % full or more: they then take less time
         * than the split 128 × 256 ones (H100, back to back, sk256 → ws128, tensor; block:128:
         * 3072×12288 M = 576 97.2 → 73.0, 110.1 → 88.0 µs, M = 640 88.8 → 72.9, 106.6 → 88.6;
         * 3072×14336 M = 640 99.2 → 89.4, 121.6 → 103.0; 4096×14336 M = 512 95.8 → 93.1, 114.4
         * → 105.8; 4096×11008 M = 512 74.7 → 67.0, 92.9 → 83.2). */
        const int full128 = tiles <= sms && 100 * tiles >= 85 * sms;
        const int vs192 = block ? 10 * waves256 < 9 * waves192 : 13 * waves256 < 10 * waves192;
        const int ws256 = 3 * waves256 < 2 * waves128 && vs192;
        /* Nor where the last row of 256-row tiles is at most half full (M mod 256 in 1…128: up
         * to half of that row's products are of rows past M) and K ≤ 8192, unless whole
         * 256-row tiles are the alternative (they waste the same rows without the split).
         * Back to back, sk256 → the kernel picked instead, tensor scales, H100 (H200):
         * 13824×5120 M = 576 211.1 → 124.3 µs (175.6 → 129.8, ws192), 8192² M = 640 175.3 →
         * 133.2 (151.5 → 134.4, ws192), 5120² M = 896 103.6 → 78.5 (91.0 → 76.2, sk128),
         * 4608×5120 M = 832 97.6 → 63.1 (88.0 → 63.4, ws128), 4096×8192 M = 2112 293.9 →
         * 209.1 (254.2 → 227.6); of 52 such points measured 1.24× faster in the geometric
         * mean on the H100 and 1.12× on the H200, the worst 2048×8192 M = 2112–2176 on the
         * H200 (119.1 → 129.8, 114.4 → 124.7). With K > 8192 sk256 stayed faster (3072×12288
         * M = 1600 196.3 against ws192's 210.6, 4096×14336 M = 1152 236.3 against sk128's
         * 304.1), and where ws256 would be taken instead (3584×8192 M = 2688 229.7 → 284.5,
         * 4096×8192 M = 3200 328.6 → 396.9). With block scales (one set in both kernels) also
         * not where K > 5120 and the 256-row tiles make one to two waves: there ws192 lost
         * (block:128, H100: 2048×8192 M = 2112 136.1 → 176.0, 3584×8192 M = 1344 166.1 →
         * 179.6, 4096×8192 M = 1088 156.1 → 170.3); elsewhere block:128 at 32 points 1.15×
         * faster on the H100 and 1.06× on the H200 (18432×5120 M = 576 312.6 → 214.4, 266.5
         * → 211.5), the worst 3584×8192 M = 2368 on the H200 (272.7 → 293.9, 1.10× faster on
         * the H100). */
        const int half256 = m % 256 && m % 256 <= 128 && k <= 8192 && !ws256 &&
                            (!block || k <= 5120 || t256 < sms || t256 >= 2 * sms);
        if (t256 < 4 * sms && few256 && !full128 && !half256 && k > 4096 && m >= 512 &&
            (t256 < 2 * sms || k <= 8192))
            return FK_VARIANT_SK256;
        if (ws256) return FK_VARIANT_WS256;
        /* Against stream-K over 128 × 128 tiles (tensor scales, K ≥ 3072, M a multiple of 128):
         * that kernel's time goes as the tiles per multiprocessor, a fraction, plus about 0.15
         * of a tile for the split tiles' sums, while a wave of 192-row tiles takes about 1.2
         * tiles' time. Back to back, ws192 → sk128, H100 (H200): 12288×3072 M = 384 57.0 →
         * 54.2 µs (57.9 → 53.4), 9216×3072 M = 512 56.8 → 54.0 (57.5 → 53.2), 4096² M = 1152
         * 75.2 → 68.1 (74.7 → 66.4), 6144×4096 M = 768 74.9 → 68.4 (74.6 → 66.6), 3072²
         * M = 1536 57.8 → 54.3 (57.0 → 52.8); kept where the model says so: 3072×12288 M = 896
         * (H200 110.5 against 113.8), 5120² M = 512 (45.7 against 49.7). Not where the last
         * row of tiles is half empty (same tile counts, H100: 12288×3072 M = 320 56.0 → 59.7,
         * 9216×3072 M = 448 56.2 → 58.8, 4096² M = 1088 74.8 → 77.1; stream-K was slower
         * there than at the larger M, its stages arriving later where activation boxes cross
         * row M), nor with K = 1536 (either way, −6 to +4 %). With block scales only where
         * the caller checked them (rescale): the stream-K kernel then keeps its second set in
         * units of the current group, within 1.12–1.24× of its tensor-scale time; with the
         * exact close it lost at every one of these points (H200, 1.08–1.46×). Against
         * ws192's one set, H100 (H200) back to back, block:128: 12288×3072 M = 384 64.2 →
         * 63.1 µs (64.8 → 61.6), 12288×12288 M = 384 276.9 → 231.9 (269.3 → 218.1), 4096²
         * M = 1152 88.8 → 78.8 (87.1 → 76.5), 3072² M = 1536 64.2 → 61.6 (64.3 → 60.6),
         * 18432×14336 M = 256 326.9 → 267.7 (315.1 → 256.6), 2048×4096 M = 2176 88.6 → 74.0
         * (86.5 → 71.9). */
        const int sk_frac = (!block || rescale) && sk_tail && sk_rows;
        if (sk_frac ? 120 * waves192 * sms < 100 * tiles + 15 * sms : waves192 * 15 < waves128 * 11)
            return FK_VARIANT_WS192;
    }
    if (!block) return sk_tail ? FK_VARIANT_SK128 : FK_VARIANT_WS128;
    /* Block scales: the warp-specialised kernels (H100, block:128, M = 64…4096: 1.1–1.25×
     * the cp.async wgmma kernels, since removed), 64-row tiles where their waves take less
     * time: a wave of them does half the work of a wave of 128-row tiles at about 3/4 of the
     * speed (M = 4096: 1.33–1.45× as long in all); so always at M ≤ 64, and above where the
     * 128-row tiles leave most multiprocessors idle (N = 3072, M = 256: 1.4× faster). (Few
     * tiles with a long K, where the tiled kernel had been picked for splitting K, are
     * stream-K's now.) Stream-K over 128 × 128 tiles where they leave a short last wave and
     * K or M is long; with checked scales (rescale: two sets, no drain per group) also
     * wherever 64-row tiles are not taken, except less than a wave with K = 2048 or a
     * half-empty last row of tiles. H100 (H200) back to back, block:128, ws128 → sk128: 3072²
     * M = 384 24.7 → 22.8 µs (24.8 → 22.3), 4608×4096 M = 256 31.3 → 27.0 (31.1 → 26.1),
     * 18432×3072 M = 384 97.8 → 90.5 (96.9 → 88.1), 18432×2048 M = 384 67.6 → 64.8 (67.6 →
     * 63.9); the exceptions lost on the H100 (2560×3072 M = 448 24.6 → 26.4, 2560×2048 M =
     * 448 18.0 → 21.0, 5120×2048 M = 256 18.0 → 19.6) and were level on the H200. */
    const long long t64 = ((n + 127) / 128) * ((m + 63) / 64);
    const long long w64 = (t64 + sms - 1) / sms;
    const int ws64 = 2 * w64 < 3 * waves128;
    const int rs_sk = rescale && !ws64 && (tiles > sms || sk_rows);
    if (sk_tail && (k > 4096 || m >= 512 || rs_sk)) return FK_VARIANT_SK128;
    return ws64 ? FK_VARIANT_WS64 : FK_VARIANT_WS128;
}

#endif

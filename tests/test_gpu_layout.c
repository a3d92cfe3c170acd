/* The GPU kernels' lane ↔ element maps (kernels/wmma_layout.h, kernels/mma_layout.h), checked
 * on the CPU: each test builds every lane's registers exactly as the kernel does, runs the
 * matrix instruction as its ISA documents it (the documented layouts are restated here,
 * independently of the headers), reads the accumulators back through the kernel's own maps and
 * compares with a direct product. A wrong map, selector or K permutation fails here without a
 * GPU. */
#include "test.h"
#include "feather/feather.h"

#include "../kernels/mma_layout.h"
#include "../kernels/wmma_layout.h"

#include <stdlib.h>

static uint32_t lcg(uint32_t *s) { return *s = *s * 1664525u + 1013904223u; }

/* A random finite e5m2 code and a random fp16 value with few mantissa bits, so that every
 * product and sum below is exact in double and the comparison can be exact. */
static uint8_t rand_e5m2(uint32_t *s) {
    uint8_t q;
    do q = (uint8_t)(lcg(s) >> 24); while ((q & 0x7c) == 0x7c || (q & 0x7c) < 0x30 || (q & 0x7c) > 0x48);
    return q;
}
static uint16_t rand_f16(uint32_t *s) {
    float v = (float)((int)(lcg(s) >> 27) - 16) / 8.0f;
    return feather_f32_to_f16(v);
}
static double h2d(uint16_t h) { return feather_f16_to_f32(h); }
/* Word w (little-endian) of a weight record or span, as one 32-bit load reads it. */
static uint32_t span_word(const uint8_t *b, int w) {
    return (uint32_t)b[4 * w] | (uint32_t)b[4 * w + 1] << 8 | (uint32_t)b[4 * w + 2] << 16 | (uint32_t)b[4 * w + 3] << 24;
}
/* Word w of a row of halves: halves 2w (low) and 2w + 1. */
static uint32_t half_word(const uint16_t *row, int w) { return (uint32_t)row[2 * w] | (uint32_t)row[2 * w + 1] << 16; }

/* v_perm_b32 D = perm(S0, S1, sel) as the RDNA3 ISA describes it: each selector byte picks a
 * byte of the 8-byte value {S0, S1} (0–3: S1, 4–7: S0), 12 gives 0x00, 13 and up 0xff. */
static uint32_t v_perm_b32(uint32_t s0, uint32_t s1, uint32_t sel) {
    uint64_t v = ((uint64_t)s0 << 32) | s1;
    uint32_t d = 0;
    for (int i = 0; i < 4; i++) {
        unsigned b = (sel >> (8 * i)) & 0xff, out;
        if (b < 8) out = (unsigned)(v >> (8 * b)) & 0xff;
        else if (b == 12) out = 0;
        else if (b >= 13) out = 0xff;
        else out = 0; /* 8–11 (sign replication) are not used by the kernels */
        d |= out << (8 * i);
    }
    return d;
}

/* PTX prmt.b32 (__byte_perm(x, y, s)) in its default mode: nibble i of s picks byte i of the
 * result from {y, x} (0–3: x, 4–7: y); bit 3 of a nibble (sign replication) is not used. */
static uint32_t prmt(uint32_t x, uint32_t y, uint32_t s) {
    uint64_t v = ((uint64_t)y << 32) | x;
    uint32_t d = 0;
    for (int i = 0; i < 4; i++) d |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return d;
}

TEST(gpu_layout_byte_selectors_make_e5m2_high_bytes) {
    uint32_t s = 7;
    for (int it = 0; it < 1000; it++) {
        uint32_t w = lcg(&s);
        uint32_t amd_lo = v_perm_b32(0, w, FK_AMD_PERM_LO), amd_hi = v_perm_b32(0, w, FK_AMD_PERM_HI);
        uint32_t nv_lo = prmt(w, 0, FK_NV_PRMT_LO), nv_hi = prmt(w, 0, FK_NV_PRMT_HI);
        for (int h = 0; h < 2; h++) {
            uint32_t want_lo = (uint32_t)((w >> (8 * h)) & 0xff) << 8;
            uint32_t want_hi = (uint32_t)((w >> (8 * (h + 2))) & 0xff) << 8;
            CHECK_EQ_U((amd_lo >> (16 * h)) & 0xffff, want_lo);
            CHECK_EQ_U((amd_hi >> (16 * h)) & 0xffff, want_hi);
            CHECK_EQ_U((nv_lo >> (16 * h)) & 0xffff, want_lo);
            CHECK_EQ_U((nv_hi >> (16 * h)) & 0xffff, want_hi);
        }
    }
}

/* ---- RDNA3 WMMA, as documented: A lane l → row l%16, B lane l → column l%16, half h → k = h;
 * lanes 16–31 repeat 0–15; C/D lane l, VGPR v → row 2v + l/16, column l%16. ---- */
static int doc_wmma_d_row(int lane, int v) { return 2 * v + lane / 16; }
static int doc_wmma_d_col(int lane) { return lane % 16; }

TEST(gpu_layout_wmma_maps_match_the_isa) {
    for (int l = 0; l < 32; l++) {
        CHECK_EQ_U(fk_wmma_a_row(l), l % 16);
        CHECK_EQ_U(fk_wmma_b_col(l), l % 16);
        for (int v = 0; v < FK_WMMA_CD_VALUES; v++) {
            CHECK_EQ_U(fk_wmma_cd_row(l, v), doc_wmma_d_row(l, v));
            CHECK_EQ_U(fk_wmma_cd_col(l), doc_wmma_d_col(l));
        }
    }
    for (int h = 0; h < 16; h++) CHECK_EQ_U(fk_wmma_ab_k(h), h);
    /* the accumulator map is a bijection onto the 16×16 tile */
    int seen[16][16] = {{0}};
    for (int l = 0; l < 32; l++)
        for (int v = 0; v < 8; v++) seen[fk_wmma_cd_row(l, v)][fk_wmma_cd_col(l)]++;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) CHECK_EQ_U(seen[r][c], 1);
}

TEST(gpu_layout_wmma_emulated_tile_product) {
    uint32_t s = 12345;
    for (int trial = 0; trial < 20; trial++) {
        uint16_t A[16][16];
        uint8_t rec[16][16]; /* the packed records of 16 columns: rec[n][i] = Q[n][k = i] */
        for (int r = 0; r < 16; r++)
            for (int k = 0; k < 16; k++) A[r][k] = rand_f16(&s);
        for (int n = 0; n < 16; n++)
            for (int i = 0; i < 16; i++) rec[n][i] = rand_e5m2(&s);
        /* registers as the kernel loads them */
        uint16_t areg[32][16], breg[32][16];
        for (int l = 0; l < 32; l++) {
            for (int h = 0; h < 16; h++) areg[l][h] = A[fk_wmma_a_row(l)][fk_wmma_ab_k(h)];
            const uint8_t *r = rec[fk_wmma_b_col(l)];
            for (int w = 0; w < 4; w++) {
                uint32_t word = span_word(r, w);
                uint32_t lo = v_perm_b32(0, word, FK_AMD_PERM_LO), hi = v_perm_b32(0, word, FK_AMD_PERM_HI);
                breg[l][4 * w + 0] = (uint16_t)lo; breg[l][4 * w + 1] = (uint16_t)(lo >> 16);
                breg[l][4 * w + 2] = (uint16_t)hi; breg[l][4 * w + 3] = (uint16_t)(hi >> 16);
            }
        }
        /* the ISA needs lanes 16–31 to carry lanes 0–15's operands */
        for (int l = 16; l < 32; l++) {
            CHECK(!memcmp(areg[l], areg[l - 16], sizeof areg[l]));
            CHECK(!memcmp(breg[l], breg[l - 16], sizeof breg[l]));
        }
        /* the instruction: D[i][j] = Σ_k A_lane_i[k] · B_lane_j[k] */
        double D[16][16];
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) {
                double t = 0;
                for (int k = 0; k < 16; k++) t += h2d(areg[i][k]) * h2d(breg[j][k]);
                D[i][j] = t;
            }
        /* read back through the kernel's map and compare with A · Wᵀ */
        for (int l = 0; l < 32; l++)
            for (int v = 0; v < 8; v++) {
                double got = D[doc_wmma_d_row(l, v)][doc_wmma_d_col(l)];
                int row = fk_wmma_cd_row(l, v), col = fk_wmma_cd_col(l);
                double want = 0;
                for (int k = 0; k < 16; k++) want += h2d(A[row][k]) * feather_e5m2_to_f32(rec[col][k]);
                if (got != want) {
                    test_fail(__FILE__, __LINE__, "lane %d value %d: %g != %g", l, v, got, want);
                    return;
                }
            }
    }
}

/* ---- NVIDIA mma.sync m16n8k16, as the PTX ISA documents it (g = lane/4, t = lane%4):
 * A a0: (g, 2t..2t+1), a1: (g+8, 2t..), a2: (g, 2t+8..), a3: (g+8, 2t+8..);
 * B b0: k 2t..2t+1, b1: k 2t+8..2t+9, column g; C c0,c1: (g, 2t..2t+1), c2,c3: (g+8, ...). ---- */
static int doc_a_row(int l, int r) { return l / 4 + (r == 1 || r == 3 ? 8 : 0); }
static int doc_a_k(int l, int r, int h) { return 2 * (l % 4) + h + (r >= 2 ? 8 : 0); }
static int doc_b_k(int l, int r, int h) { return 2 * (l % 4) + h + (r ? 8 : 0); }
static int doc_c_row(int l, int i) { return l / 4 + (i >= 2 ? 8 : 0); }
static int doc_c_col(int l, int i) { return 2 * (l % 4) + i % 2; }

/* D += A·B for one m16n8k16 instruction whose lanes hold areg and breg, read through the
 * documented layouts above. */
static void doc_mma(uint32_t areg[32][4], uint32_t breg[32][2], double D[16][8]) {
    double Am[16][16], Bm[16][8];
    for (int l = 0; l < 32; l++)
        for (int h = 0; h < 2; h++) {
            for (int r = 0; r < 4; r++) Am[doc_a_row(l, r)][doc_a_k(l, r, h)] = h2d((uint16_t)(areg[l][r] >> (16 * h)));
            for (int r = 0; r < 2; r++) Bm[doc_b_k(l, r, h)][l / 4] = h2d((uint16_t)(breg[l][r] >> (16 * h)));
        }
    for (int i = 0; i < 16; i++)
        for (int c = 0; c < 8; c++)
            for (int k = 0; k < 16; k++) D[i][c] += Am[i][k] * Bm[k][c];
}

TEST(gpu_layout_mma_maps_match_the_ptx_isa) {
    for (int l = 0; l < 32; l++) {
        for (int r = 0; r < 4; r++)
            for (int h = 0; h < 2; h++) {
                CHECK_EQ_U(fk_mma_a_row(l, r), doc_a_row(l, r));
                CHECK_EQ_U(fk_mma_a_k(l, r, h), doc_a_k(l, r, h));
                if (r < 2) CHECK_EQ_U(fk_mma_b_k(l, r, h), doc_b_k(l, r, h));
            }
        CHECK_EQ_U(fk_mma_b_col(l), l / 4);
        for (int i = 0; i < 4; i++) {
            CHECK_EQ_U(fk_mma_c_row(l, i), doc_c_row(l, i));
            CHECK_EQ_U(fk_mma_c_col(l, i), doc_c_col(l, i));
            /* the block scale loaded for accumulator i's column is its column's */
            CHECK(fk_mma_c_scol(i) >= 0 && fk_mma_c_scol(i) < FK_MMA_C_NCOLS);
            CHECK_EQ_U(fk_mma_c_col(l, fk_mma_c_scol(i)), doc_c_col(l, i));
        }
    }
}

/* A warp's block scales as fk_group_scales loads them (lane l holds columns l, l + 32, …;
 * columns past the tile read as -1 here) and as fk_flush fetches them: every accumulator of
 * every fragment must get its own column's scale, on both vendors' accumulator layouts. */
static int held_column(int nj_count, int tn, int reg, int lane) {
    const int col = lane + 32 * reg;
    return reg < (nj_count * tn + 31) / 32 && col < nj_count * tn ? col : -1;
}

TEST(gpu_layout_block_scales_reach_every_accumulator) {
    for (int nj_count = 1; nj_count <= 12; nj_count++)
        for (int nj = 0; nj < nj_count; nj++)
            for (int l = 0; l < 32; l++) {
                /* NVIDIA: 8-column fragments, a lane's accumulators in two columns */
                for (int i = 0; i < 4; i++) {
                    const int c = fk_mma_c_col(l, fk_mma_c_scol(i));
                    CHECK_EQ_U(held_column(nj_count, 8, fk_gsc_reg(nj, 8), fk_gsc_lane(nj, 8, c)), nj * 8 + doc_c_col(l, i));
                }
                /* NVIDIA with the operands swapped (M <= 8): tile t = nj / 2 holds fragments 2t
                 * and 2t + 1; accumulator i sits in column doc_c_row(l, i) of the tile */
                if (nj % 2 == 0)
                    for (int i = 0; i < 4; i++) {
                        const int f = nj + fk_swap_c_frag(i);
                        if (f >= nj_count) continue;
                        CHECK_EQ_U(held_column(nj_count, 8, fk_gsc_reg(f, 8), fk_gsc_lane(f, 8, fk_mma_c_row(l, 0))),
                                   nj * 8 + doc_c_row(l, i));
                    }
                /* AMD: 16-column fragments, one column per lane */
                CHECK_EQ_U(held_column(nj_count, 16, fk_gsc_reg(nj, 16), fk_gsc_lane(nj, 16, fk_wmma_cd_col(l))),
                           nj * 16 + doc_wmma_d_col(l));
            }
}

/* Block groups: the shift and mask taken for powers of two give what division gives, and every
 * other group size (a multiple of 16) keeps the division. */
TEST(gpu_layout_block_groups_shift_or_divide) {
    static const int groups[] = {16, 32, 48, 64, 80, 96, 128, 192, 256, 384, 1024, 4096, 3 << 12, 1 << 20};
    for (size_t i = 0; i < sizeof groups / sizeof groups[0]; i++) {
        const int g = groups[i], gs = fk_gshift(g);
        CHECK_EQ_U(gs >= 0, (g & (g - 1)) == 0);
        if (gs >= 0) CHECK_EQ_U(1u << gs, (unsigned)g);
        for (int k = 0; k < 3 * 8192; k += 16) {
            CHECK_EQ_U(fk_group_index(g, gs, k), k / g);
            CHECK_EQ_U(fk_group_starts(g, gs, k), k % g == 0);
        }
        /* the largest K the shape rule allows */
        for (int j = 0; j < 64; j++) {
            const int k = 0x7ffffff0 - 16 * j;
            CHECK_EQ_U(fk_group_index(g, gs, k), k / g);
            CHECK_EQ_U(fk_group_starts(g, gs, k), k % g == 0);
        }
    }
}

/* One super-step of every P, its registers built as MmaNv<P> builds them, run through the
 * documented instruction, and the accumulators read back through the kernel's map against a
 * direct product. swap: the product of at most 8 rows of A with the operands swapped
 * (MmaNv<P>::mma_swap): the weight spans of columns g and g+8 of a 16-column tile as the 16-row
 * operand, row g's A span as the 8-column one; accumulator i is then column fk_mma_c_row(l, i)
 * of the tile and row fk_mma_c_col(l, i) of A. */
static void check_superstep_products(int swap, uint32_t s) {
    const int rows = swap ? 8 : 16, cols = swap ? 16 : 8;
    for (int P = 1; P <= 4; P *= 2) {
        const int KS = 16 * P;
        for (int trial = 0; trial < 10; trial++) {
            uint16_t A[16][64];
            uint8_t Q[16][64];         /* Q[n][k] for the super-step's k */
            uint8_t packed[4][16][16]; /* packed[kb][n][i] = Q[n][16kb+i] */
            for (int r = 0; r < rows; r++)
                for (int k = 0; k < KS; k++) A[r][k] = rand_f16(&s);
            for (int n = 0; n < cols; n++)
                for (int k = 0; k < KS; k++) packed[k / 16][n][k % 16] = Q[n][k] = rand_e5m2(&s);
            double D[16][8] = {{0}};
            for (int j = 0; j < P; j++) {
                uint32_t areg[32][4], breg[32][2];
                for (int l = 0; l < 32; l++) {
                    const int k0 = fk_span_k0(P, l), g = fk_span_row(l);
                    if (swap) {
                        for (int r = 0; r < 4; r++) {
                            const int col = fk_span_col(l) + 8 * fk_swap_a_col8(r);
                            const uint32_t word = span_word(&packed[k0 / 16][col][k0 % 16], fk_b_word(j));
                            areg[l][r] = prmt(word, 0, fk_swap_a_hi(r) ? FK_NV_PRMT_HI : FK_NV_PRMT_LO);
                        }
                        for (int r = 0; r < 2; r++) breg[l][r] = half_word(&A[g][k0], fk_swap_b_word(j, r));
                    } else {
                        for (int r = 0; r < 4; r++) areg[l][r] = half_word(&A[g + 8 * fk_a_half(r)][k0], fk_a_word(j, r));
                        const uint32_t word = span_word(&packed[k0 / 16][fk_span_col(l)][k0 % 16], fk_b_word(j));
                        breg[l][0] = prmt(word, 0, FK_NV_PRMT_LO);
                        breg[l][1] = prmt(word, 0, FK_NV_PRMT_HI);
                    }
                }
                doc_mma(areg, breg, D);
            }
            for (int l = 0; l < 32; l++)
                for (int i = 0; i < 4; i++) {
                    const double got = D[doc_c_row(l, i)][doc_c_col(l, i)];
                    const int row = swap ? fk_mma_c_col(l, i) : fk_mma_c_row(l, i);
                    const int col = swap ? fk_mma_c_row(l, i) : fk_mma_c_col(l, i);
                    double want = 0;
                    for (int k = 0; k < KS; k++) want += h2d(A[row][k]) * feather_e5m2_to_f32(Q[col][k]);
                    if (got != want) {
                        test_fail(__FILE__, __LINE__, "swap=%d P=%d lane %d acc %d: %g != %g", swap, P, l, i, got, want);
                        return;
                    }
                }
        }
    }
}

TEST(gpu_layout_mma_emulated_superstep_product_every_p) { check_superstep_products(0, 777); }

TEST(gpu_layout_mma_swapped_superstep_product_every_p) { check_superstep_products(1, 4242); }

/* ---- Hopper wgmma with the weight as register operand: per warp, A has mma.m16n8k16's A
 * layout (doc_a_* above) in natural k order; accumulator i of a warp sits at row
 * g + 8·((i%4)/2), column 8·(i/4) + 2t + i%2 (the m16n8 C layout repeated along N). ---- */
TEST(gpu_layout_wgmma_register_operand_and_accumulators) {
    uint32_t s = 4242;
    enum { NA = 32 }; /* activation rows (the instruction's N) */
    uint8_t rec[64][16];  /* one kb of the packed weight: 64 rows × 16 k */
    uint16_t act[NA][16];
    for (int n = 0; n < 64; n++)
        for (int i = 0; i < 16; i++) rec[n][i] = rand_e5m2(&s);
    for (int m = 0; m < NA; m++)
        for (int k = 0; k < 16; k++) act[m][k] = rand_f16(&s);
    double Am[64][16];
    for (int w = 0; w < 4; w++)
        for (int l = 0; l < 32; l++) {
            int t = l & 3, g = l >> 2;
            for (int r = 0; r < 4; r++) {
                const uint8_t *rp = rec[16 * w + g + 8 * fk_wg_a_row8(r)];
                int wd = fk_wg_a_word(t, r);
                uint32_t word = span_word(rp, wd);
                uint32_t reg = prmt(word, 0, fk_wg_a_sel(t));
                for (int h = 0; h < 2; h++)
                    Am[16 * w + doc_a_row(l, r)][doc_a_k(l, r, h)] = h2d((uint16_t)(reg >> (16 * h)));
            }
        }
    for (int w = 0; w < 4; w++)
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < NA / 2; i++) {
                int drow = 16 * w + doc_c_row(l, i % 4), dcol = 8 * (i / 4) + doc_c_col(l, i % 4);
                double got = 0;
                for (int k = 0; k < 16; k++) got += Am[drow][k] * h2d(act[dcol][k]);
                int n = 16 * w + (l >> 2) + 8 * fk_wg_d_row8(i), m = fk_wg_d_col(l, i);
                double want = 0;
                for (int k = 0; k < 16; k++) want += feather_e5m2_to_f32(rec[n][k]) * h2d(act[m][k]);
                if (got != want) {
                    test_fail(__FILE__, __LINE__, "warp %d lane %d acc %d: %g != %g", w, l, i, got, want);
                    return;
                }
            }
}

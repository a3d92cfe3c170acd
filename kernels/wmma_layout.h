/*
 * Lane ↔ element maps of the gfx11 (RDNA3/3.5) wave32 instruction
 * v_wmma_f32_16x16x16_f16: D[16×16] = A[16×16] · B[16×16] + C, f32 accumulators.
 *
 * What the ISA documents (the unit tests hold these functions to it):
 *   A: lane l holds row l % 16, its 16 halves are k = 0…15 in order (8 VGPRs, two halves each,
 *      the lower k in the low half); lanes 16–31 carry the same data as lanes 0–15.
 *   B: lane l holds column l % 16, halves k = 0…15 in order; lanes 16–31 replicate 0–15.
 *   C/D: lane l, VGPR v holds row 2v + l/16, column l % 16.
 * The kernel feeds B straight from a 16-byte record of the (K/16, N, 16) layout: the record of
 * column n holds its 16 k values in order, exactly one lane's B operand.
 */
#ifndef FK_WMMA_LAYOUT_H
#define FK_WMMA_LAYOUT_H

#include "fk_hd.h"

#define FK_WMMA_LANES 32
#define FK_WMMA_AB_HALVES 16 /* per lane */
#define FK_WMMA_CD_VALUES 8  /* f32 per lane */

/* Row of A held by a lane. */
FK_HD int fk_wmma_a_row(int lane) { return lane & 15; }
/* Column of B held by a lane. */
FK_HD int fk_wmma_b_col(int lane) { return lane & 15; }
/* K index of the h-th half of a lane's A or B operand. */
FK_HD int fk_wmma_ab_k(int h) { return h; }
/* Position of accumulator value v of a lane in the 16×16 tile. */
FK_HD int fk_wmma_cd_row(int lane, int v) { return 2 * v + (lane >> 4); }
FK_HD int fk_wmma_cd_col(int lane) { return lane & 15; }

/* v_perm_b32 selectors turning bytes (0,1) / (2,3) of a word into two halves whose high bytes
 * they are: D = perm(S0 = 0, S1 = word, sel); selector byte 0–3 picks a byte of S1, 0x0c a zero. */
#define FK_AMD_PERM_LO 0x010c000cu
#define FK_AMD_PERM_HI 0x030c020cu

#endif

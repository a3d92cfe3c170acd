/*
 * Lane ↔ element maps of NVIDIA's mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 and the
 * K permutation the kernels use to feed it from the (K/16, N, 16) layout.
 *
 * The PTX ISA layout (lane l, g = l/4, t = l%4; the unit tests hold these functions to it):
 *   A (16×16, four .b32 registers a0…a3, two halves each, lower index in the low half):
 *       a0: row g, k 2t, 2t+1     a1: row g+8, k 2t, 2t+1
 *       a2: row g, k 2t+8, 2t+9   a3: row g+8, k 2t+8, 2t+9
 *   B (16×8, b0, b1): b0: k 2t, 2t+1 of column g; b1: k 2t+8, 2t+9 of column g.
 *   C/D (16×8, four f32): c0, c1: row g, columns 2t, 2t+1; c2, c3: row g+8, same columns.
 *
 * A product does not care in which order its K terms are summed, so one instruction may take
 * any 16 k values as long as A and B agree on which goes where. The kernels process a
 * "super-step" of 16P consecutive k values (P = 1, 2 or 4) in P instructions and give lane t
 * the contiguous span k ∈ [4Pt, 4Pt + 4P) of it: 4P bytes of one record of column g (a single
 * 4-, 8- or 16-byte load) and 4P halves of rows g and g+8 of A. Instruction j uses the words
 * j of the B span and 2j, 2j+1 of the A spans, so its positions 2t, 2t+1, 2t+8, 2t+9 hold the
 * logical k = 4Pt + 4j + 0, 1, 2, 3. Block scales need every super-step inside one K-group,
 * hence P = 4 only when 64 divides the group, 2 when 32 does, else 1.
 *
 * With at most 8 rows of A the skinny kernel swaps the operands (MmaNv::mma_swap): the weight
 * spans of columns g and g+8 of a 16-column tile fill A's registers (a0/a2 from column g's word
 * j, a1/a3 from column g+8's), row g's A span fills B's (b0, b1: words 2j and 2j+1), so the
 * same K permutation holds and accumulator i is column fk_mma_c_row(lane, i) of the tile, row
 * fk_mma_c_col(lane, i) of A.
 */
#ifndef FK_MMA_LAYOUT_H
#define FK_MMA_LAYOUT_H

#include "fk_hd.h"

/* ---- the PTX ISA layout ---- */
/* Register r (0…3) of A, half h (0, 1): row and k of the element. */
FK_HD int fk_mma_a_row(int lane, int r) { return (lane >> 2) + 8 * (r & 1); }
FK_HD int fk_mma_a_k(int lane, int r, int h) { return 2 * (lane & 3) + h + 8 * (r >> 1); }
/* Register r (0, 1) of B, half h: k and column. */
FK_HD int fk_mma_b_k(int lane, int r, int h) { return 2 * (lane & 3) + h + 8 * r; }
FK_HD int fk_mma_b_col(int lane) { return lane >> 2; }
/* Accumulator i (0…3): row and column. */
FK_HD int fk_mma_c_row(int lane, int i) { return (lane >> 2) + 8 * (i >> 1); }
FK_HD int fk_mma_c_col(int lane, int i) { return 2 * (lane & 3) + (i & 1); }
/* A lane's accumulators lie in 2 columns: accumulator i in that of accumulator fk_mma_c_scol(i)
 * (the kernels load one block scale per column, not per accumulator). */
#define FK_MMA_C_NCOLS 2
FK_HD int fk_mma_c_scol(int i) { return i & 1; }

/* ---- the kernels' K permutation ---- */
/* First k (within the super-step) of a lane's span, and the span's length, for a given P. */
FK_HD int fk_span_k0(int P, int lane) { return 4 * P * (lane & 3); }
FK_HD int fk_span_len(int P) { return 4 * P; }
/* Row (0…15 within the m16 tile) of the first A span of a lane; the second is 8 rows lower. */
FK_HD int fk_span_row(int lane) { return lane >> 2; }
/* Column (0…7) of the lane's B span. */
FK_HD int fk_span_col(int lane) { return lane >> 2; }
/* For instruction j, A register r is word fk_a_word(j, r) of the span of row
 * g + 8·fk_a_half(r) (word w holds span halves 2w, 2w+1). */
FK_HD int fk_a_word(int j, int r) { return 2 * j + (r >> 1); }
FK_HD int fk_a_half(int r) { return r & 1; }
/* For instruction j, B register r comes from word j of the B span: bytes 2r, 2r+1. */
FK_HD int fk_b_word(int j) { return j; }

/* The swapped product (at most 8 rows of A; see the top): for instruction j, A register r
 * holds bytes 0,1 (fk_swap_a_hi(r) = 0) or 2,3 of word fk_b_word(j) of the weight span of
 * column g + 8·fk_swap_a_col8(r); B register r is word fk_swap_b_word(j, r) of row g's A span. */
FK_HD int fk_swap_a_col8(int r) { return r & 1; }
FK_HD int fk_swap_a_hi(int r) { return r >> 1; }
FK_HD int fk_swap_b_word(int j, int r) { return fk_a_word(j, 2 * r); }
/* Accumulator i of swapped tile t lies in column fk_mma_c_row(l, 0) (= g) of fragment
 * 2t + fk_swap_c_frag(i). */
FK_HD int fk_swap_c_frag(int i) { return i >> 1; }

/* prmt (__byte_perm(w, 0, sel)) selectors turning bytes (0,1) / (2,3) of w into two halves
 * whose high bytes they are: selector nibble n picks byte n of the result, 0–3 from w, 4 = 0. */
#define FK_NV_PRMT_LO 0x1404u
#define FK_NV_PRMT_HI 0x3424u

/* ---- wgmma m64nNk16 (sm_90a) with the weight as the register operand ----
 * Per warp of the warpgroup, the register operand A (16 weight rows × 16 k) has the layout of
 * mma.m16n8k16's A above, in natural k order (the activation operand comes from shared memory
 * in natural order). Lane t's k pairs 2t, 2t+1 and 2t+8, 2t+9 are bytes 2t… and 2t+8… of the
 * 16-byte record of its row: word t/2 and word 2 + t/2, low or high half by t's parity.
 * Accumulator i of a warp: row (weight) g + 8·((i/2)%2) of the warp's 16, column (activation
 * row) 8·(i/4) + 2t + i%2. */
FK_HD int fk_wg_a_row8(int r) { return r & 1; }                    /* register r: row g or g+8 */
FK_HD int fk_wg_a_word(int t, int r) { return (t >> 1) + 2 * (r >> 1); } /* word of the record */
FK_HD unsigned fk_wg_a_sel(int t) { return (t & 1) ? FK_NV_PRMT_HI : FK_NV_PRMT_LO; }
FK_HD int fk_wg_d_row8(int i) { return (i >> 1) & 1; }
FK_HD int fk_wg_d_col(int lane, int i) { return 8 * (i >> 2) + 2 * (lane & 3) + (i & 1); }

#endif

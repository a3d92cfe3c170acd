/* FK_HD marks the small layout functions that both the kernels and the CPU unit tests call:
 * host+device under a GPU compiler, plain static inline C elsewhere. */
#ifndef FK_HD_H
#define FK_HD_H
#if defined(__CUDACC__) || defined(__HIP__)
#define FK_HD static inline __host__ __device__
#else
#define FK_HD static inline
#endif

/* Block scales of a warp's tile, NJ fragments of tn columns (tn divides 32): lane l holds the
 * scales of columns l, l + 32, … in registers 0, 1, …, so the scale of column c (0 ≤ c < tn) of
 * fragment nj is register fk_gsc_reg(nj, tn) of lane fk_gsc_lane(nj, tn, c). Both vendors'
 * kernels use these (gemm.hip, fk_flush). */
FK_HD int fk_gsc_reg(int nj, int tn) { return nj * tn / 32; }
FK_HD int fk_gsc_lane(int nj, int tn, int c) { return (nj * tn + c) % 32; }

/* Block scales in groups of g along K (a multiple of 16): the group holding k, and whether one
 * starts at k, with gshift = fk_gshift(g). A shift and a mask where g is a power of two (the
 * usual sizes), else a division, which by a value known only at run time costs some 20
 * instructions (the skinny kernels made two per super-step, the warp-specialised ones two per
 * group). */
FK_HD int fk_gshift(int g) {
    for (int s = 0; s < 31; s++)
        if (g == 1 << s) return s;
    return -1;
}
FK_HD int fk_group_index(int g, int gshift, int k) { return gshift >= 0 ? k >> gshift : k / g; }
FK_HD int fk_group_starts(int g, int gshift, int k) { return gshift >= 0 ? (k & (g - 1)) == 0 : k % g == 0; }
#endif

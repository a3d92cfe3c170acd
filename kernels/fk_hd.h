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
#endif

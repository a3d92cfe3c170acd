/* FK_HD marks the small layout functions that both the kernels and the CPU unit tests call:
 * host+device under a GPU compiler, plain static inline C elsewhere. */
#ifndef FK_HD_H
#define FK_HD_H
#if defined(__CUDACC__) || defined(__HIP__)
#define FK_HD static inline __host__ __device__
#else
#define FK_HD static inline
#endif
#endif

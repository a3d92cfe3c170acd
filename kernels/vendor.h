/*
 * One source for two vendors. The kernels and their host code are written against the HIP
 * runtime names; under nvcc this header maps the few names they use to CUDA's. HIP's own
 * NVIDIA headers are not used (the versions packaged with Debian no longer compile against
 * CUDA 13). Device-side differences that are not names (byte permutes, async copies, the
 * matrix instructions) live in small inline functions here and in the mma_*.h policies.
 */
#ifndef FK_VENDOR_H
#define FK_VENDOR_H

#include <stddef.h>
#include <stdint.h>

#if defined(__HIP__) || defined(__HIP_PLATFORM_AMD__)
#define FK_AMD 1
#include <hip/hip_runtime.h>
#elif defined(__CUDACC__)
#define FK_NVIDIA 1
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#define hipError_t cudaError_t
#define hipSuccess cudaSuccess
#define hipErrorInvalidValue cudaErrorInvalidValue
#define hipErrorNoDevice cudaErrorNoDevice
#define hipErrorNotSupported cudaErrorNotSupported
#define hipGetErrorString cudaGetErrorString
#define hipGetLastError cudaGetLastError
#define hipGetDeviceCount cudaGetDeviceCount
#define hipGetDevice cudaGetDevice
#define hipDeviceProp_t cudaDeviceProp
#define hipGetDeviceProperties cudaGetDeviceProperties
#define hipDeviceGetAttribute cudaDeviceGetAttribute
#define hipDeviceAttributeMultiprocessorCount cudaDevAttrMultiProcessorCount
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipMemset cudaMemset
#define hipMemsetAsync cudaMemsetAsync
#define hipDeviceSynchronize cudaDeviceSynchronize
#define hipStream_t cudaStream_t
#define hipFuncSetAttribute cudaFuncSetAttribute
#define hipFuncAttributeMaxDynamicSharedMemorySize cudaFuncAttributeMaxDynamicSharedMemorySize
#define hipOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxActiveBlocksPerMultiprocessor
#define hipMemcpyAsync cudaMemcpyAsync
#define hipMemcpy2DAsync cudaMemcpy2DAsync
#define hipHostMalloc cudaHostAlloc
#define hipHostMallocDefault cudaHostAllocDefault
#define hipHostFree cudaFreeHost
#define hipMemGetInfo cudaMemGetInfo
#define hipStreamCreateWithFlags cudaStreamCreateWithFlags
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipStreamDestroy cudaStreamDestroy
#define hipStreamSynchronize cudaStreamSynchronize
#define hipEvent_t cudaEvent_t
#define hipEventCreateWithFlags cudaEventCreateWithFlags
#define hipEventDisableTiming cudaEventDisableTiming
#define hipEventRecord cudaEventRecord
#define hipEventSynchronize cudaEventSynchronize
#define hipEventDestroy cudaEventDestroy
#else
#error "kernels/ are built with nvcc or a HIP compiler"
#endif

/* The matrix-fragment layer the kernels are built on: NVIDIA's mma.sync and wgmma (FK_FRAG_NV)
 * or gfx11's WMMA (FK_FRAG_WMMA, mma_amd.h). FK_WMMA_EMULATED builds the gfx11 kernels for an
 * NVIDIA GPU, the WMMA instruction done with warp shuffles after the ISA's documented layout:
 * everything in them but that one instruction then runs, and is tested, on NVIDIA hardware
 * (make WMMA_EMULATED=1). */
#if FK_AMD || defined(FK_WMMA_EMULATED)
#define FK_FRAG_WMMA 1
#else
#define FK_FRAG_NV 1
#endif

/* The least shared memory a block may use on the GPUs a build is for: a gfx11 workgroup
 * addresses 64 KiB of LDS; NVIDIA's sm_86, sm_89 and sm_120 allow 99 KiB per block (sm_80 163
 * KiB, sm_90 227 KiB). Every skinny kernel fits it; a tiled kernel above it also exists with fewer
 * stages, for GPUs that have less than it needs (gemm.hip, fk_smem_limit). */
#if FK_FRAG_WMMA
#define FK_SMEM_FLOOR (64 * 1024)
#else
#define FK_SMEM_FLOOR (99 * 1024)
#endif

#include "mma_layout.h"
#include "wmma_layout.h"

/* ---- bit conversions ---- */
__device__ __forceinline__ float fk_f16_to_f32(uint16_t h) {
#if FK_NVIDIA
    return __half2float(__ushort_as_half(h));
#else
    return (float)__builtin_bit_cast(_Float16, h);
#endif
}

__device__ __forceinline__ float fk_bf16_to_f32(uint16_t b) {
    return __uint_as_float((uint32_t)b << 16);
}

/* Round to nearest even; overflow gives ±Inf, NaN stays NaN. */
__device__ __forceinline__ uint16_t fk_f32_to_f16(float v) {
#if FK_NVIDIA
    return __half_as_ushort(__float2half_rn(v));
#else
    return __builtin_bit_cast(uint16_t, (_Float16)v);
#endif
}

/* Round to nearest even on the bits, as feather_f32_to_bf16 does. */
__device__ __forceinline__ uint16_t fk_f32_to_bf16(float v) {
    uint32_t u = __float_as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ---- e5m2 → fp16: the byte becomes the high byte of the half, two per 32-bit word ---- */
__device__ __forceinline__ uint32_t fk_e5m2x2_lo(uint32_t w) { /* bytes 0,1 → two halves */
#if FK_NVIDIA
    return __byte_perm(w, 0u, FK_NV_PRMT_LO);
#else
    return __builtin_amdgcn_perm(0u, w, FK_AMD_PERM_LO);
#endif
}
__device__ __forceinline__ uint32_t fk_e5m2x2_hi(uint32_t w) { /* bytes 2,3 → two halves */
#if FK_NVIDIA
    return __byte_perm(w, 0u, FK_NV_PRMT_HI);
#else
    return __builtin_amdgcn_perm(0u, w, FK_AMD_PERM_HI);
#endif
}

/* ---- global → shared copies of B bytes (16, past L1; or 4, through it: the only way
 * cp.async takes 4 bytes); invalid sources are filled with zeros ---- */
#if FK_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define FK_ASYNC_COPY 1
#endif

template <int B>
__device__ __forceinline__ void fk_copy(void *smem, const void *gmem, bool valid) {
    static_assert(B == 16 || B == 4, "16 or 4 bytes");
#if FK_ASYNC_COPY
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int n = valid ? B : 0;
    if constexpr (B == 16) asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
    else asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
#else
    if constexpr (B == 16) *(uint4 *)smem = valid ? *(const uint4 *)gmem : make_uint4(0, 0, 0, 0);
    else *(float *)smem = valid ? *(const float *)gmem : 0.0f;
#endif
}
__device__ __forceinline__ void fk_copy_commit() {
#if FK_ASYNC_COPY
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> __device__ __forceinline__ void fk_copy_wait() {
#if FK_ASYNC_COPY
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* ---- streaming loads of the weight (read once: keep them out of L1) ---- */
__device__ __forceinline__ uint4 fk_ld_stream16(const void *p) {
#if FK_NVIDIA
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
#else
    typedef uint32_t v4u __attribute__((ext_vector_type(4)));
    v4u v = __builtin_nontemporal_load((const v4u *)p);
    return make_uint4(v.x, v.y, v.z, v.w);
#endif
}
__device__ __forceinline__ uint2 fk_ld_stream8(const void *p) {
#if FK_NVIDIA
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];\n"
                 : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
#else
    typedef uint32_t v2u __attribute__((ext_vector_type(2)));
    v2u v = __builtin_nontemporal_load((const v2u *)p);
    return make_uint2(v.x, v.y);
#endif
}
__device__ __forceinline__ uint32_t fk_ld_stream4(const void *p) {
#if FK_NVIDIA
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];\n" : "=r"(v) : "l"(p));
    return v;
#else
    return __builtin_nontemporal_load((const uint32_t *)p);
#endif
}

/* ---- exchange within aligned groups of 16 threads (the quantiser's lane teams) ---- */
__device__ __forceinline__ float fk_shfl_xor16(float v, int mask) {
#if FK_NVIDIA
    return __shfl_xor_sync(0xffffu << (threadIdx.x & 16), v, mask, 16);
#else
    return __shfl_xor(v, mask, 16);
#endif
}

/* ---- v of lane src of the (whole, converged) warp ---- */
__device__ __forceinline__ float fk_shfl(float v, int src) {
#if FK_NVIDIA
    return __shfl_sync(0xffffffffu, v, src);
#else
    return __shfl(v, src, 32);
#endif
}

/* ---- all lanes of the (converged) warp meet here; memory accesses are not moved across it ---- */
__device__ __forceinline__ void fk_syncwarp() {
#if FK_NVIDIA
    __syncwarp();
#else
    __builtin_amdgcn_wave_barrier();
#endif
}

/* ---- back-to-back launches (programmatic dependent launch, sm_90+) ----
 * A kernel launched with programmatic stream serialisation may start while the kernel before
 * it in the stream is still finishing, once every block of that one has called
 * fk_grid_release or exited. Until fk_grid_wait returns (the previous kernel complete, its
 * writes visible) it must not read what earlier work wrote nor write anything: it may warm
 * L2 (fk_prefetch_l2; L2 is coherent for every multiprocessor, so a line prefetched before
 * another kernel writes it is not stale) and read what the kernel before it does not write
 * (the matrix product: its weight and scales, see fk_gemm). Without the launch
 * attribute both calls do nothing. No-ops elsewhere. */
#if FK_NVIDIA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FK_GRID_DEPENDENCY 1
#endif
__device__ __forceinline__ void fk_grid_wait() {
#if FK_GRID_DEPENDENCY
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void fk_grid_release() {
#if FK_GRID_DEPENDENCY
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void fk_prefetch_l2(const void *p) {
#if FK_GRID_DEPENDENCY
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
#else
    (void)p;
#endif
}

/* *p += v at device scope with release and acquire semantics; returns the old value. */
__device__ __forceinline__ unsigned fk_atomic_add_acq_rel(unsigned *p, unsigned v) {
#if FK_NVIDIA
    unsigned old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;\n" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return old;
#else
    return __hip_atomic_fetch_add(p, v, __ATOMIC_ACQ_REL, __HIP_MEMORY_SCOPE_AGENT);
#endif
}

/* A load that bypasses the non-coherent L1, for data other blocks wrote during this launch. */
__device__ __forceinline__ float fk_ld_coherent(const float *p) {
#if FK_NVIDIA
    return __ldcg(p);
#else
    return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
#endif
}

#endif

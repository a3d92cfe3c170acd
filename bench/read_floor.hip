/*
 * The read floor of the M <= 16 matrix product: kernels that do nothing but read a weight's bytes
 * once (and fold them into one word per thread so that the loads stay), launched the way the
 * library launches its skinny kernels (programmatic stream serialisation). fb_read reads one
 * contiguous run per block, with an optional L2 warm-up of its first bytes before the wait for
 * the previous kernel; fb_stage copies its first bytes to shared memory before that wait;
 * fb_tiles reads the packed (K/16, N, 16) weight in column tiles, as a product over that layout
 * must. Timed back to back by bench/read_floor.py beside the library's product on the same
 * bytes, they say how much of the weight-bandwidth target any kernel can reach at a given size
 * on a given GPU. NVIDIA only (the back-to-back launch is a CUDA attribute); built by `make
 * read-floor`.
 */
#include "../kernels/vendor.h"

/* Each block reads one contiguous run of 16-byte words, UNROLL loads in flight per thread. */
template <int UNROLL>
__global__ void fb_read(const uint4 *p, size_t n, unsigned *out, size_t warm) {
    const size_t per = (n + gridDim.x - 1) / gridDim.x;
    const size_t lo = blockIdx.x * per, hi = lo + per < n ? lo + per : n;
    const size_t wend = lo + warm < hi ? lo + warm : hi;
    for (size_t i = lo + threadIdx.x * 8; i < wend; i += blockDim.x * 8) fk_prefetch_l2(p + i);
    fk_grid_wait();
    fk_grid_release();
    unsigned acc = 0;
    for (size_t i = lo + threadIdx.x; i < hi; i += (size_t)blockDim.x * UNROLL) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const size_t j = i + (size_t)u * blockDim.x;
            v[u] = j < hi ? __ldcs(p + j) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) acc += v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

/* The same with the block's first `stage` bytes copied to shared memory before the wait
 * (cp.async: no registers held while they are out), so that where a block of the next kernel
 * fits beside one of this kernel, it streams its bytes while this one finishes; with `early`
 * the next kernel is released before the wait instead of after it, so that it may be launched
 * as soon as every block of this one has started. The rest is read after the wait. */
__global__ void fb_stage(const uint4 *p, size_t n, unsigned *out, size_t stage, int early) {
    constexpr int UNROLL = 8;
    extern __shared__ uint4 fb_smem[];
    const size_t per = (n + gridDim.x - 1) / gridDim.x;
    const size_t lo = blockIdx.x * per, hi = lo + per < n ? lo + per : n;
    const size_t send = lo + stage < hi ? lo + stage : hi;
    for (size_t i = lo + threadIdx.x; i < send; i += blockDim.x) fk_copy<16>(fb_smem + (i - lo), p + i, true);
    fk_copy_commit();
    if (early) fk_grid_release();
    fk_grid_wait();
    if (!early) fk_grid_release();
    unsigned acc = 0;
    for (size_t i = send + threadIdx.x; i < hi; i += (size_t)blockDim.x * UNROLL) {
        uint4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const size_t j = i + (size_t)u * blockDim.x;
            v[u] = j < hi ? __ldcs(p + j) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) acc += v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    fk_copy_wait<0>();
    for (size_t i = lo + threadIdx.x; i < send; i += blockDim.x) {
        const uint4 v = fb_smem[i - lo]; /* this thread's own copies: no barrier needed */
        acc += v.x ^ v.y ^ v.z ^ v.w;
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

/* The packed weight (K/16, N, 16) read the way a product over it reads it: block (x, y) reads
 * the columns [x * BN, (x + 1) * BN) over the y-th of `splits` runs of its K/16 rows, each warp
 * a contiguous part of that run, R rows (R * BN 16-byte pieces over the warp's lanes, PER per
 * lane) per step and the next step's loads out before the current one is folded, as the skinny
 * kernels hold one super-step in flight beside the one in use; the first `warm` steps of each
 * warp are sent to L2 before the wait. With CG > 1 the tile is CG adjacent sub-tiles of BN / CG
 * columns read side by side, warp w the sub-tile w % CG over the (w / CG)-th part of the run:
 * tiles wider than one warp's registers hold (a whole K/16 row of N columns at BN = N). */
template <int PER>
__global__ void fb_tiles(const uint4 *q, int N, int KB, int BN, int R, int warm, int CG, unsigned *out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (blockDim.x >> 5) / CG;
    const int seg = blockIdx.y * nw + warp / CG, nseg = gridDim.y * nw;
    const int lo = (int)((long long)seg * KB / nseg), hi = (int)((long long)(seg + 1) * KB / nseg);
    const uint4 *col = q + (size_t)blockIdx.x * BN + (size_t)(warp % CG) * (BN / CG);
    BN /= CG;
    for (int r = lo; r < hi && r < lo + warm * R; r++)
        for (int c = lane * 8; c < BN; c += 256) fk_prefetch_l2(col + (size_t)r * N + c);
    fk_grid_wait();
    fk_grid_release();
    auto load = [&](uint4(&v)[PER], int r0) {
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const int piece = lane + 32 * i, r = r0 + piece / BN;
            v[i] = piece < R * BN && r < hi ? __ldcs(col + (size_t)r * N + piece % BN) : make_uint4(0, 0, 0, 0);
        }
    };
    unsigned acc = 0;
    uint4 cur[PER], nxt[PER];
    if (lo < hi) load(cur, lo);
    for (int r0 = lo; r0 < hi; r0 += R) {
        if (r0 + R < hi) load(nxt, r0 + R);
#pragma unroll
        for (int i = 0; i < PER; i++) {
            acc += cur[i].x ^ cur[i].y ^ cur[i].z ^ cur[i].w;
            cur[i] = nxt[i];
        }
    }
    out[(blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x] = acc;
}

/* One launch's configuration: grid x block threads, smem bytes of dynamic shared memory, on
 * stream; back to back (programmatic stream serialisation) when pdl. Not copyable: cfg points at
 * attr. */
struct FbLaunch {
    cudaLaunchConfig_t cfg;
    cudaLaunchAttribute attr;
    FbLaunch(dim3 grid, dim3 block, size_t smem, void *stream, bool pdl) : cfg{}, attr{} {
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.dynamicSmemBytes = smem;
        cfg.stream = (cudaStream_t)stream;
        attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr.val.programmaticStreamSerializationAllowed = 1;
        cfg.attrs = &attr;
        cfg.numAttrs = pdl ? 1 : 0;
    }
    FbLaunch(const FbLaunch &) = delete;
    FbLaunch &operator=(const FbLaunch &) = delete;
};

/* bytes: a multiple of 16; out: blocks * threads words; warm: bytes per block sent to L2 before
 * the wait; pdl: launch with programmatic stream serialisation. Returns a CUDA error code. */
extern "C" int fb_read_launch(const void *p, size_t bytes, unsigned *out, int blocks, int threads, int unroll,
                              size_t warm, int pdl, void *stream) {
    FbLaunch l(dim3(blocks), dim3(threads), 0, stream, pdl);
    const cudaLaunchConfig_t &cfg = l.cfg;
    const uint4 *q = (const uint4 *)p;
    const size_t n = bytes / 16, w = warm / 16;
    switch (unroll) {
    case 2: return (int)cudaLaunchKernelEx(&cfg, fb_read<2>, q, n, out, w);
    case 4: return (int)cudaLaunchKernelEx(&cfg, fb_read<4>, q, n, out, w);
    case 8: return (int)cudaLaunchKernelEx(&cfg, fb_read<8>, q, n, out, w);
    default: return (int)cudaErrorInvalidValue;
    }
}

/* fb_stage with `stage` bytes of shared memory per block (a multiple of 16), always back to
 * back. Returns a CUDA error code. */
extern "C" int fb_stage_launch(const void *p, size_t bytes, unsigned *out, int blocks, int threads, size_t stage,
                               int early, void *stream) {
    cudaError_t e = cudaFuncSetAttribute(fb_stage, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)stage);
    if (e != cudaSuccess) return (int)e;
    FbLaunch l(dim3(blocks), dim3(threads), stage, stream, true);
    return (int)cudaLaunchKernelEx(&l.cfg, fb_stage, (const uint4 *)p, bytes / 16, out, stage / 16, early);
}

/* fb_tiles over an N x K weight (N % bn == 0, K % 16 == 0) in N / bn x splits blocks of
 * `warps` warps (a multiple of cg, the sub-tiles per tile), back to back; out: one word per
 * thread. smem: bytes of shared memory each block holds without using them, so that no block
 * of the next kernel fits beside this one's (as none fits beside a product whose blocks fill
 * the register file). Returns a CUDA error code (cudaErrorLaunchOutOfResources where the
 * block's registers do not fit). */
template <int PER>
static cudaError_t fb_tiles_go(const cudaLaunchConfig_t &cfg, const uint4 *p, int n, int kb, int bn, int rows, int warm,
                               int cg, unsigned *out) {
    cudaError_t e = cudaFuncSetAttribute(fb_tiles<PER>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cfg.dynamicSmemBytes);
    return e != cudaSuccess ? e : cudaLaunchKernelEx(&cfg, fb_tiles<PER>, p, n, kb, bn, rows, warm, cg, out);
}
extern "C" int fb_tiles_launch(const void *q, int n, int k, int bn, int splits, int warps, int rows, int warm,
                               int cg, size_t smem, unsigned *out, void *stream) {
    if (cg < 1 || bn % cg || warps % cg) return (int)cudaErrorInvalidValue;
    FbLaunch l(dim3(n / bn, splits), dim3(warps * 32), smem, stream, true);
    const cudaLaunchConfig_t &cfg = l.cfg;
    const uint4 *p = (const uint4 *)q;
    const int kb = k / 16;
    cudaError_t e;
    switch ((rows * (bn / cg) + 31) / 32) {
    case 1: e = fb_tiles_go<1>(cfg, p, n, kb, bn, rows, warm, cg, out); break;
    case 2: e = fb_tiles_go<2>(cfg, p, n, kb, bn, rows, warm, cg, out); break;
    case 3: e = fb_tiles_go<3>(cfg, p, n, kb, bn, rows, warm, cg, out); break;
    case 4: e = fb_tiles_go<4>(cfg, p, n, kb, bn, rows, warm, cg, out); break;
    case 6: e = fb_tiles_go<6>(cfg, p, n, kb, bn, rows, warm, cg, out); break;
    case 8: e = fb_tiles_go<8>(cfg, p, n, kb, bn, rows, warm, cg, out); break;
    case 12: e = fb_tiles_go<12>(cfg, p, n, kb, bn, rows, warm, cg, out); break;
    case 16: e = fb_tiles_go<16>(cfg, p, n, kb, bn, rows, warm, cg, out); break;
    default: return (int)cudaErrorInvalidValue;
    }
    if (e != cudaSuccess) cudaGetLastError(); /* a launch that does not fit is an answer, not an error to keep */
    return (int)e;
}

extern "C" int fb_sm_count(void) {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return -1;
    return n;
}

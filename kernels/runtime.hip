/* The runtime calls the library needs, behind the C interface of fk_api.h: device discovery and
 * plain device memory (src/gpu.c), streams, events, page-locked host memory and asynchronous
 * copies (src/gpu_quant.c). */
#include "vendor.h"
#include "fk_api.h"

#include <stdio.h>
#include <string.h>

extern "C" const char *fk_error_string(int code) { return hipGetErrorString((hipError_t)code); }

/* A kernel of this library that the device must be able to run: tells "no binary for this
 * GPU" apart from a working device. */
__global__ void fk_probe_kernel(int *x) {
    if (x) *x = 1;
}

extern "C" int fk_init(char *desc, size_t len) {
    char tmp[256];
    if (!desc || !len) {
        desc = tmp;
        len = sizeof tmp;
    }
    int n = 0;
    hipError_t e = hipGetDeviceCount(&n);
    if (e != hipSuccess || n < 1) {
        snprintf(desc, len, "no GPU device (%s)", e != hipSuccess ? hipGetErrorString(e) : "none found");
        return e != hipSuccess ? (int)e : (int)hipErrorNoDevice;
    }
    int dev = 0;
    hipDeviceProp_t prop;
    if ((e = hipGetDevice(&dev)) != hipSuccess || (e = hipGetDeviceProperties(&prop, dev)) != hipSuccess) {
        snprintf(desc, len, "cannot query the GPU (%s)", hipGetErrorString(e));
        return (int)e;
    }
#if FK_NVIDIA
    if (prop.major < 8) {
        snprintf(desc, len, "%s (sm_%d%d) is older than sm_80, which the kernels need", prop.name, prop.major, prop.minor);
        return (int)hipErrorNoDevice;
    }
#if FK_FRAG_WMMA
    const char *kernels = ", gfx11 kernels with WMMA emulated";
#else
    const char *kernels = "";
#endif
    snprintf(desc, len, "%s, sm_%d%d, %d SMs%s", prop.name, prop.major, prop.minor, prop.multiProcessorCount, kernels);
#else
    if (strncmp(prop.gcnArchName, "gfx11", 5) != 0) {
        snprintf(desc, len, "%s (%s) is not an RDNA3/3.5 (gfx11) GPU, which the kernels need", prop.name, prop.gcnArchName);
        return (int)hipErrorNoDevice;
    }
    snprintf(desc, len, "%s, %s, %d CUs", prop.name, prop.gcnArchName, prop.multiProcessorCount);
#endif
    /* Run something: creates the context and proves the binary suits this device. */
    int *d = nullptr;
    if ((e = hipMalloc((void **)&d, sizeof(int))) == hipSuccess) {
        fk_probe_kernel<<<1, 1>>>(d);
        e = hipGetLastError();
        if (e == hipSuccess) e = hipDeviceSynchronize();
        (void)hipFree(d);
    }
    if (e != hipSuccess) {
        char name[200];
        snprintf(name, sizeof name, "%s", desc);
#if FK_AMD && defined(FK_HIP_ARCHS)
        /* another gfx11 chip than the build's (RX 7600–7800: gfx1101–1102, Phoenix: gfx1103) */
        const int arch_len = (int)strcspn(prop.gcnArchName, ":");
        snprintf(desc, len, "%s cannot run the kernels (%s): they are built for %s; rebuild with "
                 "make GPU=hip HIP_ARCHS=%.*s", name, hipGetErrorString(e), FK_HIP_ARCHS, arch_len, prop.gcnArchName);
#else
        snprintf(desc, len, "%s cannot run the kernels (%s)", name, hipGetErrorString(e));
#endif
        return (int)e;
    }
    return 0;
}

extern "C" int fk_malloc(void **p, size_t bytes) { return (int)hipMalloc(p, bytes ? bytes : 1); }
extern "C" int fk_free(void *p) { return p ? (int)hipFree(p) : 0; }
extern "C" int fk_to_device(void *dst, const void *src, size_t bytes) {
    return bytes ? (int)hipMemcpy(dst, src, bytes, hipMemcpyHostToDevice) : 0;
}
extern "C" int fk_to_host(void *dst, const void *src, size_t bytes) {
    return bytes ? (int)hipMemcpy(dst, src, bytes, hipMemcpyDeviceToHost) : 0;
}
extern "C" int fk_memset(void *dst, int value, size_t bytes) { return bytes ? (int)hipMemset(dst, value, bytes) : 0; }
extern "C" int fk_synchronize(void) { return (int)hipDeviceSynchronize(); }

/* ---- asynchronous work (the quantiser's pipeline, src/gpu_quant.c) ---- */
extern "C" int fk_host_alloc(void **p, size_t bytes) {
    *p = nullptr;
    return (int)hipHostMalloc(p, bytes ? bytes : 1, hipHostMallocDefault);
}
extern "C" int fk_host_free(void *p) { return p ? (int)hipHostFree(p) : 0; }
extern "C" int fk_stream_create(void **stream) {
    hipStream_t s = nullptr;
    hipError_t e = hipStreamCreateWithFlags(&s, hipStreamNonBlocking);
    *stream = e == hipSuccess ? (void *)s : nullptr;
    return (int)e;
}
extern "C" int fk_stream_destroy(void *stream) { return stream ? (int)hipStreamDestroy((hipStream_t)stream) : 0; }
extern "C" int fk_stream_sync(void *stream) { return (int)hipStreamSynchronize((hipStream_t)stream); }
extern "C" int fk_event_create(void **event) {
    hipEvent_t ev = nullptr;
    hipError_t e = hipEventCreateWithFlags(&ev, hipEventDisableTiming);
    *event = e == hipSuccess ? (void *)ev : nullptr;
    return (int)e;
}
extern "C" int fk_event_destroy(void *event) { return event ? (int)hipEventDestroy((hipEvent_t)event) : 0; }
extern "C" int fk_event_record(void *event, void *stream) {
    return (int)hipEventRecord((hipEvent_t)event, (hipStream_t)stream);
}
extern "C" int fk_event_sync(void *event) { return (int)hipEventSynchronize((hipEvent_t)event); }
extern "C" int fk_to_device_async(void *dst, const void *src, size_t bytes, void *stream) {
    return bytes ? (int)hipMemcpyAsync(dst, src, bytes, hipMemcpyHostToDevice, (hipStream_t)stream) : 0;
}
extern "C" int fk_to_host_async(void *dst, const void *src, size_t bytes, void *stream) {
    return bytes ? (int)hipMemcpyAsync(dst, src, bytes, hipMemcpyDeviceToHost, (hipStream_t)stream) : 0;
}
extern "C" int fk_to_host_2d_async(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                   size_t height, void *stream) {
    if (!width || !height) return 0;
    return (int)hipMemcpy2DAsync(dst, dpitch, src, spitch, width, height, hipMemcpyDeviceToHost, (hipStream_t)stream);
}
extern "C" int fk_memset_async(void *dst, int value, size_t bytes, void *stream) {
    return bytes ? (int)hipMemsetAsync(dst, value, bytes, (hipStream_t)stream) : 0;
}
extern "C" int fk_mem_info(size_t *free_bytes, size_t *total_bytes) {
    return (int)hipMemGetInfo(free_bytes, total_bytes);
}

/* The runtime calls src/gpu.c needs, behind the C interface of fk_api.h: device discovery and
 * plain device memory. */
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
    snprintf(desc, len, "%s, sm_%d%d, %d SMs", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
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
        snprintf(desc, len, "%s cannot run the kernels (%s)", name, hipGetErrorString(e));
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

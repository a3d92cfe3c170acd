/* Device names and the choice between CPU and GPU (feather.h), shared by the matrix product and
 * quantisation. Whether a GPU is usable is gpu.c's question. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

feather_status feather_device_parse(const char *s, feather_device *dev, feather_error *err) {
    static const char *names[] = {"auto", "cpu", "gpu"};
    for (int i = 0; i < 3; i++)
        if (s && !strcmp(s, names[i])) {
            *dev = (feather_device)i;
            return FEATHER_OK;
        }
    char q[64];
    return feather_fail(err, FEATHER_E_ARG, "device '%s': expected auto, cpu or gpu",
                        feather_quote(s ? s : "", q, sizeof q));
}

const char *feather_device_name(feather_device d) {
    switch (d) {
    case FEATHER_DEVICE_CPU: return "cpu";
    case FEATHER_DEVICE_GPU: return "gpu";
    default: return "auto";
    }
}

feather_status feather_device_select(feather_device want, feather_device *got, int *fell_back,
                                     char *why, size_t len, feather_error *err) {
    char desc[256];
    if (fell_back) *fell_back = 0;
    if (why && len) why[0] = 0;
    if (want == FEATHER_DEVICE_CPU) {
        *got = FEATHER_DEVICE_CPU;
        return FEATHER_OK;
    }
    int ok = feather_gpu_available(desc, sizeof desc);
    if (why && len) snprintf(why, len, "%s", desc);
    if (ok) {
        *got = FEATHER_DEVICE_GPU;
        return FEATHER_OK;
    }
    if (want == FEATHER_DEVICE_GPU)
        return feather_fail(err, FEATHER_E_UNSUPPORTED, "device gpu: no usable GPU: %s", desc);
    *got = FEATHER_DEVICE_CPU;
    if (fell_back) *fell_back = 1;
    return FEATHER_OK;
}

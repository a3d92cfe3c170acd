/*
 * libFuzzer target for what the converter makes of a file: every input that opens as a
 * safetensors file held in memory is planned in both layouts (feather_plan_new), which reads
 * names, shapes and dtypes, the layouts of quantised weights' scales, ComfyUI tags (comfy_quant
 * tensors and the header's _quantization_metadata) and compressed-tensors' names, as any writer
 * may give them. It must never crash or hang, and every entry must have an output name. Seeds:
 * the header corpus, and small files of each quantised layout feather reads (corpus/q_*).
 *
 *   make fuzz FUZZ_SECONDS=60   (this target runs for half of them)
 */
#include "reader_internal.h"
#include "feather/convert.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    feather_error err = {0};
    feather_reader *r = NULL;
    if (st_open_memory(&r, data, size, "fuzz", 0, &err)) return 0;
    for (int layout = 0; layout < 2; layout++) {
        feather_convert_options o;
        feather_convert_defaults(&o);
        if (layout) { /* ComfyUI's reads one scale per tensor */
            o.layout = FEATHER_LAYOUT_COMFY;
            o.quant.mode = FEATHER_SCALE_TENSOR;
        }
        feather_plan *p = NULL;
        if (feather_plan_new(&p, r, &o, &err)) continue;
        for (size_t i = 0; i < feather_plan_count(p); i++)
            if (!feather_plan_at(p, i)->name) abort();
        feather_plan_free(p);
    }
    feather_close(r);
    return 0;
}

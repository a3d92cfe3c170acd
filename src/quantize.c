/* feather_quantize: the scale search followed by the cast (and packing) with the chosen
 * scales. Kept apart from scale.c so that the search can be linked without the cast. */
#include "internal.h"
#include "feather/quant.h"

feather_status feather_quantize(feather_ctx *ctx, const feather_quant_options *opts,
                                feather_dtype dtype, const void *w, uint64_t n, uint64_t k,
                                int packed, uint8_t *q, float *scales,
                                feather_quant_stats *stats, feather_error *err) {
    feather_status st = feather_scale_search(ctx, opts, dtype, w, n, k, scales, err);
    if (st) return st;
    return feather_quantize_with(ctx, opts, dtype, w, n, k, scales, packed, q, stats, err);
}

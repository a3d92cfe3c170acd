/* What the benchmark programs share: a monotonic clock and a seeded normal generator (the same
 * sequence on every run, so figures are comparable across machines and builds). */
#ifndef FEATHER_BENCH_UTIL_H
#define FEATHER_BENCH_UTIL_H

#include <math.h>
#include <stdint.h>
#include <time.h>

static inline double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Standard normal values by Box-Muller from a 64-bit LCG that starts at a fixed seed. */
static inline double gauss(void) {
    static uint64_t rs = 12345;
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    double u = ((rs >> 11) + 1) * 0x1p-53;
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    double v = (rs >> 11) * 0x1p-53;
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

#endif

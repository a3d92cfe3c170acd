/* Helpers shared by tests: writing small checkpoints with the library writer. */
#ifndef FEATHER_TESTUTIL_H
#define FEATHER_TESTUTIL_H

#include "feather/feather.h"

typedef struct tspec {
    const char *name;
    feather_dtype dtype;
    unsigned ndim;
    uint64_t shape[5];
} tspec;

/* Writes a checkpoint of the given tensors filled with seeded N(0, 0.02)-like values (floats),
 * or seeded bytes (other dtypes), in the given order. meta: NULL or "k1", "v1", …, NULL.
 * Returns 0 on success. */
int tu_write_model(const char *path, const tspec *t, size_t n, uint64_t seed, const char *const *meta);

/* Writes a checkpoint of one BF16 tensor "big.weight" of rows x cols, all zeros, as a sparse
 * file (no disk blocks for the data): inputs of gigabytes for the rules that weigh sizes.
 * Returns 0 on success. */
int tu_write_sparse_model(const char *path, uint64_t rows, uint64_t cols);

/* Deterministic pseudo-random helpers. */
uint64_t tu_rand(uint64_t *state);
double tu_normal(uint64_t *state);

/* Whole file into memory, followed by a zero byte (caller frees); NULL on error. */
uint8_t *tu_read_file(const char *path, size_t *len);
int tu_files_equal(const char *a, const char *b);

/* 1 when the upper halves of the vector registers (YMM0-15, ZMM0-15) are in use: code that
 * returns like that (no vzeroupper) makes later SSE code slow on recent Intel cores. 0 when
 * they are not, -1 when it cannot be told (no XGETBV with ECX = 1, or an ASan build). */
int tu_vector_upper_in_use(void);

/* Confines this thread, and the programs it starts, to the first n cores it may run on (the
 * CPU affinity, as taskset sets it), or gives back the set it had when n is 0. Returns n, or
 * fewer where the process may not run on that many. */
int tu_confine_cores(int n);

/* 1 when a GPU is usable (named on the output), else a loud skip of `what` and 0. */
int tu_gpu_or_skip(const char *what);

/* 1 when the usable GPU is a Hopper (compute capability 9.0, where the wgmma kernels run, unless
 * the build has the gfx11 kernels with WMMA emulated instead), and
 * with sms > 0 when it also has that many multiprocessors (the count the pick's rules are fitted
 * on); read from feather_gpu_available's description. */
int tu_gpu_hopper(int sms);

#endif

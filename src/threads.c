/* Execution context: a persistent thread pool and the SIMD level used by the kernels.
 *
 * One job at a time per context: feather_parallel_for hands out chunks of the range through an
 * atomic counter, so uneven chunks balance themselves, and the calling thread works too. */
#include "internal.h"

#include <pthread.h>
#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct feather_ctx {
    int nthreads;          /* workers including the caller */
    feather_simd simd;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t wake, done;
    pthread_mutex_t job_mu; /* serialises jobs from different caller threads */
    /* current job */
    unsigned long generation;
    int stop;
    int active;             /* workers still inside the current job */
    feather_range_fn fn;
    void *arg;
    size_t n, chunk;
    atomic_size_t next;
};

static void run_chunks(struct feather_ctx *c, int worker) {
    for (;;) {
        size_t b = atomic_fetch_add(&c->next, c->chunk);
        if (b >= c->n) break;
        size_t e = b + c->chunk < c->n ? b + c->chunk : c->n;
        c->fn(c->arg, b, e, worker);
    }
}

struct worker_arg { struct feather_ctx *c; int id; };

static void *worker_main(void *p) {
    struct worker_arg wa = *(struct worker_arg *)p;
    free(p);
    struct feather_ctx *c = wa.c;
    unsigned long seen = 0;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->stop && c->generation == seen) pthread_cond_wait(&c->wake, &c->mu);
        if (c->stop) break;
        seen = c->generation;
        pthread_mutex_unlock(&c->mu);
        run_chunks(c, wa.id);
        pthread_mutex_lock(&c->mu);
        if (--c->active == 0) pthread_cond_signal(&c->done);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* The cores this process may run on: its CPU affinity (taskset, a container's cpuset), as
 * nproc counts them, else the online ones. */
int feather_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

feather_ctx *feather_ctx_new(int threads) {
    if (threads <= 0) threads = feather_cores();
    if (threads > 1024) threads = 1024;
    struct feather_ctx *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->nthreads = threads;
    c->simd = feather_simd_detect();
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->job_mu, NULL);
    pthread_cond_init(&c->wake, NULL);
    pthread_cond_init(&c->done, NULL);
    if (threads > 1) {
        c->threads = calloc((size_t)threads - 1, sizeof *c->threads);
        if (!c->threads) { free(c); return NULL; }
        for (int i = 1; i < threads; i++) {
            struct worker_arg *wa = malloc(sizeof *wa);
            if (wa) {
                wa->c = c;
                wa->id = i;
            }
            if (!wa || pthread_create(&c->threads[i - 1], NULL, worker_main, wa) != 0) {
                free(wa);
                c->nthreads = i; /* run with what we got */
                break;
            }
        }
    }
    return c;
}

void feather_ctx_free(feather_ctx *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    c->stop = 1;
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->mu);
    for (int i = 1; i < c->nthreads; i++) pthread_join(c->threads[i - 1], NULL);
    free(c->threads);
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->job_mu);
    pthread_cond_destroy(&c->wake);
    pthread_cond_destroy(&c->done);
    free(c);
}

int feather_ctx_threads(const feather_ctx *c) { return c ? c->nthreads : 1; }

void feather_parallel_for(const feather_ctx *cc, size_t n, size_t grain, feather_range_fn fn,
                          void *arg) {
    struct feather_ctx *c = (struct feather_ctx *)cc;
    if (n == 0) return;
    if (grain == 0) grain = 1;
    if (!c || c->nthreads == 1 || n <= grain) {
        fn(arg, 0, n, 0);
        return;
    }
    pthread_mutex_lock(&c->job_mu);
    /* About four chunks per worker balances uneven work without much hand-out traffic. */
    size_t chunk = n / ((size_t)c->nthreads * 4);
    if (chunk < grain) chunk = grain;
    pthread_mutex_lock(&c->mu);
    c->fn = fn;
    c->arg = arg;
    c->n = n;
    c->chunk = chunk;
    atomic_store(&c->next, 0);
    c->active = c->nthreads - 1;
    c->generation++;
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->mu);
    run_chunks(c, 0);
    pthread_mutex_lock(&c->mu);
    while (c->active > 0) pthread_cond_wait(&c->done, &c->mu);
    pthread_mutex_unlock(&c->mu);
    pthread_mutex_unlock(&c->job_mu);
}

/* ---- SIMD level ---- */
#if defined(__x86_64__) || defined(__i386__)
/* clang 14's __builtin_cpu_supports does not know "f16c": ask CPUID (leaf 1, ECX bit 29). */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

feather_simd feather_simd_cpu(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return FEATHER_SIMD_AVX512;
    if (__builtin_cpu_supports("avx2") && cpu_has_f16c() && __builtin_cpu_supports("fma"))
        return FEATHER_SIMD_AVX2;
#endif
    return FEATHER_SIMD_SCALAR;
}

feather_simd feather_simd_detect(void) {
    feather_simd s = feather_simd_cpu();
    const char *env = getenv("FEATHER_SIMD");
    if (env) {
        feather_simd want = s;
        if (!strcmp(env, "scalar")) want = FEATHER_SIMD_SCALAR;
        else if (!strcmp(env, "avx2")) want = FEATHER_SIMD_AVX2;
        else if (!strcmp(env, "avx512")) want = FEATHER_SIMD_AVX512;
        if (want < s) s = want;
    }
    return s;
}

const char *feather_simd_name(feather_simd s) {
    switch (s) {
    case FEATHER_SIMD_AVX512: return "avx512";
    case FEATHER_SIMD_AVX2: return "avx2";
    default: return "scalar";
    }
}

feather_status feather_ctx_set_simd(feather_ctx *c, feather_simd s) {
    if (!c || s > feather_simd_cpu()) return FEATHER_E_UNSUPPORTED;
    c->simd = s;
    return FEATHER_OK;
}

feather_simd feather_ctx_simd(const feather_ctx *c) {
    return c ? c->simd : feather_simd_detect();
}

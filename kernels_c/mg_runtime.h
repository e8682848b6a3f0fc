/* minigraph native runtime: what every kernel family uses (kernels_c/README.md).
 *
 *   - error codes: every mg_* kernel returns MG_OK, MG_EINVAL (bad sizes, dtype or a NULL
 *     buffer) or MG_ENOMEM (a scratch allocation failed);
 *   - the instruction set: chosen once with __builtin_cpu_supports (the best one this CPU
 *     runs), narrowed by mg_set_isa for tests and benchmarks; each family keeps one table
 *     of kernels per ISA and picks it with mg_isa_pick once per call;
 *   - threads: one runtime for every family, the worker pool (mg_pool_run, mg_pool_rows;
 *     pthreads, no OpenMP), mg_native_threads (the guard for children
 *     forked after the pool started) and the helpers that split work.
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_MG_RUNTIME_H
#define MINIGRAPH_MG_RUNTIME_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

/* BEGIN CDEF */
#define MG_OK 0
#define MG_EINVAL 1
#define MG_ENOMEM 2

#define MG_ISA_SCALAR 0
#define MG_ISA_AVX2 1
#define MG_ISA_AVX512 2

/* The instruction set in use (the best supported one unless mg_set_isa chose another). */
int mg_isa(void);
/* Use `isa` if this CPU supports it; returns the ISA now in use. */
int mg_set_isa(int isa);
/* The best ISA this CPU supports. */
int mg_best_isa(void);
/* The same three under their first names (the Python side calls these). */
int mg_bn_isa(void);
int mg_bn_set_isa(int isa);
int mg_bn_best_isa(void);
/* The size in bytes of the data (or unified) cache of `level` (1, 2 or 3) that cpu0 sees:
 * Linux's /sys/devices/system/cpu/cpu0/cache, else sysconf (glibc: cpuid); 0 if unknown.
 * Read once. Kernels size their blocking and choose their stores from it at run time. */
int64_t mg_cache_size(int level);
/* END CDEF */

/* ------------------------------------------------------------------------------------------ */
/* For the C kernels only                                                                      */

#if defined(__x86_64__) || defined(__i386__)
#define MG_X86 1
#else
#define MG_X86 0
#endif

#define MG_NISA 3

/* The per-ISA files compile their code between MG_TARGET_<ISA>_BEGIN and MG_TARGET_END: for
 * the extensions mg_set_isa checks the CPU for, so it runs only where they exist. */
#define MG_TARGET_AVX2_BEGIN                                                                \
    _Pragma("GCC push_options") _Pragma("GCC target(\"avx2,fma,f16c\")")
#define MG_TARGET_AVX512_BEGIN                                                              \
    _Pragma("GCC push_options")                                                             \
    _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,fma\")")
#define MG_TARGET_END _Pragma("GCC pop_options")

/* Per-ISA names in a family's template: MG_ISA_FN(fwd) is fwd_avx2 where the including
 * <family>_isa_avx2.c defined MG_ISA_NAME as avx2. */
#define MG_GLUE_(a, b) a##_##b
#define MG_GLUE(a, b) MG_GLUE_(a, b)
#define MG_ISA_FN(name) MG_GLUE(name, MG_ISA_NAME)

/* A family's kernel tables, one per ISA, as an array for mg_isa_pick (on other CPUs than
 * x86 only the scalar one exists). */
#if MG_X86
#define MG_ISA_TABLES(scalar, avx2, avx512) {(scalar), (avx2), (avx512)}
#else
#define MG_ISA_TABLES(scalar, avx2, avx512) {(scalar), NULL, NULL}
#endif

/* The table of the ISA in use: tables[mg_isa()], or the closest one below it that exists.
 * Called once per kernel call (so a mg_set_isa between calls takes effect at the next). */
static inline const void *mg_isa_pick(const void *const tables[MG_NISA])
{
    int isa = mg_isa();
    while (isa > MG_ISA_SCALAR && !tables[isa])
        --isa;
    return tables[isa];
}

/* The thread count a call may use: `requested`, or 1 below 2 and in a child forked after the
 * pool started (its workers do not survive fork()). Records that threads were used when it
 * returns more. */
int mg_native_threads(int requested);

/* The worker pool (every family's threads, batch norm's included): mg_pool_run(nt, count, fn, ctx) runs
 * fn(ctx, item, tid) for every item < count on up to nt threads, the calling thread (tid 0)
 * and pool workers (tids 1 .. nt - 1), and returns when all are done. Items are handed out
 * one at a time with cache affinity: [0, count) is cut into one contiguous share per thread,
 * and thread tid runs its own share in order before it takes the next shares' leftovers
 * (tid + 1, tid + 2, ...). Kernels number their items in memory order, so repeated calls over
 * the same buffers, and an op reading what the op before it wrote, give each thread the
 * same part of the data, still in its core's caches (2 threads on a Zen 4 VM: a batch-norm
 * inference over a 26 MB tensor in 128 items took 0.42 ms handed out in plain order, 0.23 ms
 * in shares), while a descheduled thread's items are still taken by the others. Unlike a default OpenMP team, an idle worker keeps polling (yielding the core to
 * any other runnable thread) for MG_POOL_SPIN_US before it sleeps: the Python between two
 * kernels of a step does not put it to sleep, so the next kernel does not wait tens of
 * microseconds for a halted vCPU to wake, and beside another busy process it gives its core
 * away at once. One job at a time: a call made while another thread's job runs (or with
 * nt <= 1, or in a child forked while a job ran) runs its items on the calling thread. A
 * worker woken from sleep that Linux queued on the job's own CPU moves to another CPU it may
 * run on (narrowing its CPU mask for a moment; mg_runtime.c, leave_master_cpu). */
#define MG_POOL_SPIN_US 300
typedef void (*mg_pool_fn)(void *ctx, int64_t item, int tid);
void mg_pool_run(int nt, int64_t count, mg_pool_fn fn, void *ctx);

/* fn(ctx, lo, hi) over rows [0, rows) on the pool, in chunks of whole multiples of `align`
 * rows (about 4 chunks per thread; chunks are independent: any thread may run any). */
typedef void (*mg_rows_fn)(void *ctx, int64_t lo, int64_t hi);
void mg_pool_rows(int nt, int64_t rows, int64_t align, mg_rows_fn fn, void *ctx);

/* Threads for streaming `elements` elements (pools, elementwise ops): small tensors stay on
 * the calling thread (waking the pool costs more than they do). */
static inline int mg_stream_threads(int requested, int64_t elements)
{
    return elements < (1 << 15) ? 1 : mg_native_threads(requested);
}

/* Threads for a call of `work` multiply-adds (convolutions): small problems stay on the
 * calling thread, and a thread gets at least 2e5 of them (a pool job costs microseconds to
 * tens of microseconds). */
static inline int mg_work_threads(int requested, double work)
{
    if (work < 2e5)
        return 1;
    if (requested > 1 && work < 2e5 * requested)
        requested = (int)(work / 2e5) + 1;
    return mg_native_threads(requested);
}

/* A 64-byte aligned scratch of `count` floats (NULL when out of memory; free() it). */
static inline float *mg_alloc_floats(int64_t count)
{
    size_t bytes = ((size_t)count * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

#endif

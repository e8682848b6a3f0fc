/* minigraph native runtime: instruction set and threads (see mg_runtime.h). */
#define _GNU_SOURCE /* sched_getcpu, sched_setaffinity */
#include "mg_runtime.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------ */
/* Threads and fork                                                                            */

/* The pool's workers do not survive fork(): the child has only the forking thread, and the
 * pool's locks may be held by threads that no longer exist there. So a child forked after
 * the pool started runs every call on its calling thread (same results: they do not depend
 * on the thread count). */
static int g_used_threads, g_serial_only;

static void forked_child(void)
{
    if (__atomic_load_n(&g_used_threads, __ATOMIC_RELAXED))
        __atomic_store_n(&g_serial_only, 1, __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, forked_child);
}

int mg_native_threads(int requested)
{
    if (requested <= 1 || __atomic_load_n(&g_serial_only, __ATOMIC_RELAXED))
        return 1;
    __atomic_store_n(&g_used_threads, 1, __ATOMIC_RELAXED);
    return requested;
}

/* ------------------------------------------------------------------------------------------ */
/* The worker pool (mg_pool_run)                                                               */

#define POOL_MAX 1024
#define INDEX_BITS 40 /* cursor = generation << INDEX_BITS | next item */

typedef struct {
    mg_pool_fn fn;
    void *ctx;
    int64_t count;
    int nt;
} pool_job;

static struct {
    pthread_mutex_t run;   /* held by the thread whose job runs */
    pthread_mutex_t lock;  /* guards sleeping and waking */
    pthread_cond_t wake;
    int started;           /* workers 1 .. started run (under `run`) */
    int sleepers;          /* workers waiting on `wake` (under `lock`) */
    uint64_t generation;   /* of the latest job (atomic) */
    uint64_t cursor;       /* its generation and next item (atomic) */
    int active;            /* workers inside a job (atomic) */
    int master_cpu;        /* the CPU the latest job was published from (atomic) */
    pool_job slot[2];      /* job g in slot[g & 1]: never rewritten while job g may run */
} pool = {.run = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER,
            .wake = PTHREAD_COND_INITIALIZER};

static uint64_t now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

/* Claims the next item of job g: its index, or -1 when g has none left (or is over). */
static int64_t claim(uint64_t g, int64_t count)
{
    uint64_t c = __atomic_load_n(&pool.cursor, __ATOMIC_ACQUIRE);
    for (;;) {
        const int64_t item = (int64_t)(c & ((1ull << INDEX_BITS) - 1));
        if (c >> INDEX_BITS != (g & ((1ull << (64 - INDEX_BITS)) - 1)) || item >= count)
            return -1;
        if (__atomic_compare_exchange_n(&pool.cursor, &c, c + 1, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE))
            return item;
    }
}

/* Waits until the generation is not `seen`: polls (yielding) for MG_POOL_SPIN_US, then
 * sleeps on `wake`. */
static uint64_t await_job(uint64_t seen)
{
    const uint64_t start = now_us();
    for (unsigned n = 1;; ++n) {
        const uint64_t g = __atomic_load_n(&pool.generation, __ATOMIC_ACQUIRE);
        if (g != seen)
            return g;
        if (n % 64 == 0 && now_us() - start > MG_POOL_SPIN_US)
            break;
        sched_yield();
    }
    pthread_mutex_lock(&pool.lock);
    ++pool.sleepers;
    uint64_t g;
    while ((g = __atomic_load_n(&pool.generation, __ATOMIC_ACQUIRE)) == seen)
        pthread_cond_wait(&pool.wake, &pool.lock);
    --pool.sleepers;
    pthread_mutex_unlock(&pool.lock);
    return g;
}

/* A woken worker that Linux placed on the CPU of the thread that woke it moves to another CPU
 * it may run on. Why: on the 2-vCPU KVM guests we measure, the wake-up of a sleeping worker
 * sometimes queued it behind the job's own thread although the other vCPU sat idle (seen
 * with sched_switch/sched_migrate_task tracing), and no load balancing moved it before the
 * next tick: the whole job ran on one CPU (a 26 MB batch-norm inference took 0.8 ms instead
 * of 0.35 ms in about half the samples of a benchmark that let the pool sleep between
 * samples). Narrowing the worker's CPU mask to the others migrates it at once; restoring
 * the mask right after leaves it where it landed (the mask is the thread's own, so taskset
 * and cgroup limits are kept). Nothing happens where the thread has only this CPU. */
static void leave_master_cpu(void)
{
    const int here = sched_getcpu();
    if (here < 0 || here != __atomic_load_n(&pool.master_cpu, __ATOMIC_RELAXED))
        return;
    cpu_set_t allowed, elsewhere;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return;
    elsewhere = allowed;
    CPU_CLR(here, &elsewhere);
    if (CPU_COUNT(&elsewhere) > 0 && sched_setaffinity(0, sizeof elsewhere, &elsewhere) == 0)
        sched_setaffinity(0, sizeof allowed, &allowed);
}

static void *pool_worker(void *arg)
{
    const int tid = (int)(intptr_t)arg;
    uint64_t seen = __atomic_load_n(&pool.generation, __ATOMIC_ACQUIRE);
    for (;;) {
        const uint64_t g = await_job(seen);
        seen = g;
        /* read as a seqlock reads: the master rewrites this slot only for job g + 2, after
         * publishing job g + 1, so an unchanged generation after the reads means the copy
         * is job g's */
        const pool_job *slot = &pool.slot[g & 1];
        const pool_job job = {__atomic_load_n(&slot->fn, __ATOMIC_RELAXED),
                              __atomic_load_n(&slot->ctx, __ATOMIC_RELAXED),
                              __atomic_load_n(&slot->count, __ATOMIC_RELAXED),
                              __atomic_load_n(&slot->nt, __ATOMIC_RELAXED)};
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&pool.generation, __ATOMIC_RELAXED) != g || tid >= job.nt)
            continue; /* a newer job already (its own turn comes), or not one of its threads */
        leave_master_cpu();
        __atomic_add_fetch(&pool.active, 1, __ATOMIC_ACQ_REL);
        for (int64_t item; (item = claim(g, job.count)) >= 0;)
            job.fn(job.ctx, item, tid);
        __atomic_sub_fetch(&pool.active, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

/* Workers 1 .. nt - 1 running (under `run`); returns how many threads the job can use. */
static int start_workers(int nt)
{
    if (nt > POOL_MAX)
        nt = POOL_MAX;
    while (pool.started < nt - 1) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int failed = pthread_create(&thread, &attr, pool_worker,
                                          (void *)(intptr_t)(pool.started + 1));
        pthread_attr_destroy(&attr);
        if (failed)
            break;
        ++pool.started;
    }
    return pool.started + 1 < nt ? pool.started + 1 : nt;
}

enum { AFFINE_MAX_SHARES = 64 };

typedef struct {
    int64_t next, end; /* the share's next unclaimed item, its end */
    char pad[64 - 2 * sizeof(int64_t)];
} affine_share;

typedef struct {
    mg_pool_fn fn;
    void *ctx;
    int shares;
    affine_share *share;
} affine_job;

/* One pool item is a ticket for one item of the shares: the first unclaimed one of the
 * thread's own share, else of the next non-empty share. A ticket always finds one: a share
 * that is empty stays empty, so a ticket finding none would mean that all `count` items were
 * claimed by the other count - 1 tickets. */
static void affine_item(void *ctx, int64_t ticket, int tid)
{
    (void)ticket;
    const affine_job *job = ctx;
    for (int s = 0; s < job->shares; ++s) {
        affine_share *share = &job->share[(tid + s) % job->shares];
        if (__atomic_load_n(&share->next, __ATOMIC_RELAXED) >= share->end)
            continue;
        const int64_t item = __atomic_fetch_add(&share->next, 1, __ATOMIC_RELAXED);
        if (item < share->end) {
            job->fn(job->ctx, item, tid);
            return;
        }
    }
}

void mg_pool_run(int nt, int64_t count, mg_pool_fn fn, void *ctx)
{
    if (count <= 0)
        return;
    nt = nt > 1 && count > 1 ? mg_native_threads(nt) : 1;
    if (nt > 1 && pthread_mutex_trylock(&pool.run) != 0)
        nt = 1; /* another thread's job is running */
    if (nt <= 1) {
        for (int64_t i = 0; i < count; ++i)
            fn(ctx, i, 0);
        return;
    }
    nt = start_workers(nt);
    /* items in nt contiguous shares, each thread its own first (mg_runtime.h) */
    const int shares = nt < AFFINE_MAX_SHARES ? nt : AFFINE_MAX_SHARES;
    affine_share share[AFFINE_MAX_SHARES] __attribute__((aligned(64)));
    for (int s = 0; s < shares; ++s) {
        share[s].next = count * s / shares;
        share[s].end = count * (s + 1) / shares;
    }
    affine_job job = {fn, ctx, shares, share};
    fn = affine_item;
    ctx = &job;
    const uint64_t g = __atomic_load_n(&pool.generation, __ATOMIC_RELAXED) + 1;
    pool_job *slot = &pool.slot[g & 1];
    __atomic_store_n(&slot->fn, fn, __ATOMIC_RELAXED);
    __atomic_store_n(&slot->ctx, ctx, __ATOMIC_RELAXED);
    __atomic_store_n(&slot->count, count, __ATOMIC_RELAXED);
    __atomic_store_n(&slot->nt, nt, __ATOMIC_RELAXED);
    __atomic_store_n(&pool.cursor, (g & ((1ull << (64 - INDEX_BITS)) - 1)) << INDEX_BITS,
                     __ATOMIC_RELEASE);
    __atomic_store_n(&pool.master_cpu, sched_getcpu(), __ATOMIC_RELAXED);
    pthread_mutex_lock(&pool.lock);
    __atomic_store_n(&pool.generation, g, __ATOMIC_RELEASE);
    int woke = pool.sleepers > 0;
    if (woke)
        pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int64_t item; (item = claim(g, count)) >= 0;) {
        fn(ctx, item, 0);
        /* a woken worker that has not started after this thread's first item may be queued
         * behind it on this CPU: one yield lets it run and leave (leave_master_cpu) */
        if (woke && !__atomic_load_n(&pool.active, __ATOMIC_ACQUIRE))
            sched_yield();
        woke = 0;
    }
    /* every item is claimed: wait for the workers still running theirs */
    for (unsigned n = 1; __atomic_load_n(&pool.active, __ATOMIC_ACQUIRE) > 0; ++n)
        if (n % 64 == 0)
            sched_yield();
    pthread_mutex_unlock(&pool.run);
}

typedef struct {
    mg_rows_fn fn;
    void *ctx;
    int64_t rows, chunk;
} rows_job;

static void rows_item(void *ctx, int64_t item, int tid)
{
    (void)tid;
    const rows_job *j = ctx;
    const int64_t lo = item * j->chunk, hi = lo + j->chunk < j->rows ? lo + j->chunk : j->rows;
    j->fn(j->ctx, lo, hi);
}

void mg_pool_rows(int nt, int64_t rows, int64_t align, mg_rows_fn fn, void *ctx)
{
    if (rows <= 0)
        return;
    if (nt <= 1) {
        fn(ctx, 0, rows);
        return;
    }
    if (align < 1)
        align = 1;
    int64_t chunk = (rows + 4 * (int64_t)nt - 1) / (4 * (int64_t)nt);
    chunk = (chunk + align - 1) / align * align;
    rows_job job = {fn, ctx, rows, chunk};
    mg_pool_run(nt, (rows + chunk - 1) / chunk, rows_item, &job);
}

/* ------------------------------------------------------------------------------------------ */
/* Instruction set                                                                             */

static int g_isa = -1; /* -1: not chosen yet */

/* What the per-ISA files are compiled for (MG_TARGET_AVX2, MG_TARGET_AVX512). */
static int isa_supported(int isa)
{
    if (isa == MG_ISA_SCALAR)
        return 1;
#if MG_X86
    __builtin_cpu_init();
    if (isa == MG_ISA_AVX2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    if (isa == MG_ISA_AVX512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma");
#endif
    return 0;
}

int mg_best_isa(void)
{
    for (int isa = MG_ISA_AVX512; isa > MG_ISA_SCALAR; --isa)
        if (isa_supported(isa))
            return isa;
    return MG_ISA_SCALAR;
}

int mg_isa(void)
{
    int isa = __atomic_load_n(&g_isa, __ATOMIC_RELAXED);
    if (isa < 0) {
        isa = mg_best_isa();
        __atomic_store_n(&g_isa, isa, __ATOMIC_RELAXED);
    }
    return isa;
}

int mg_set_isa(int isa)
{
    if (isa >= MG_ISA_SCALAR && isa <= MG_ISA_AVX512 && isa_supported(isa))
        __atomic_store_n(&g_isa, isa, __ATOMIC_RELAXED);
    return mg_isa();
}

int mg_bn_isa(void) { return mg_isa(); }
int mg_bn_set_isa(int isa) { return mg_set_isa(isa); }
int mg_bn_best_isa(void) { return mg_best_isa(); }

/* ------------------------------------------------------------------------------------------ */
/* Cache sizes                                                                                 */

/* The size of cpu0's data or unified cache of `level` from Linux's /sys (what a virtual
 * machine's kernel was told: glibc's sysconf may report the host socket's whole L3), or 0. */
static int64_t sys_cache_size(int level)
{
    for (int index = 0; index < 16; ++index) {
        char path[96], type[32] = "";
        int found_level = 0;
        long kib = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
        FILE *f = fopen(path, "r");
        if (!f)
            return 0;
        const int ok_level = fscanf(f, "%d", &found_level) == 1;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", index);
        if (!ok_level || found_level != level || !(f = fopen(path, "r")))
            continue;
        const int ok_type = fscanf(f, "%31s", type) == 1;
        fclose(f);
        if (!ok_type || type[0] == 'I') /* Data or Unified */
            continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
        if (!(f = fopen(path, "r")))
            continue;
        const int ok_size = fscanf(f, "%ldK", &kib) == 1;
        fclose(f);
        if (ok_size && kib > 0)
            return (int64_t)kib * 1024;
    }
    return 0;
}

static int64_t conf_cache_size(int level)
{
#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE) && defined(_SC_LEVEL3_CACHE_SIZE)
    const int names[] = {_SC_LEVEL1_DCACHE_SIZE, _SC_LEVEL2_CACHE_SIZE, _SC_LEVEL3_CACHE_SIZE};
    const long size = sysconf(names[level - 1]);
    return size > 0 ? (int64_t)size : 0;
#else
    (void)level;
    return 0;
#endif
}

int64_t mg_cache_size(int level)
{
    static int64_t sizes[3] = {-1, -1, -1};
    if (level < 1 || level > 3)
        return 0;
    int64_t size = __atomic_load_n(&sizes[level - 1], __ATOMIC_RELAXED);
    if (size < 0) {
        size = sys_cache_size(level);
        if (size == 0)
            size = conf_cache_size(level);
        __atomic_store_n(&sizes[level - 1], size, __ATOMIC_RELAXED);
    }
    return size;
}

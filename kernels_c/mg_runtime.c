/* minigraph native runtime: instruction set and threads (see mg_runtime.h). */
#include "mg_runtime.h"

#include <pthread.h>

/* ------------------------------------------------------------------------------------------ */
/* Threads and fork                                                                            */

/* GNU OpenMP's thread pool does not survive fork(): a child that enters a parallel region
 * after its parent used one waits forever. So a child forked after a parallel region runs
 * every call on its calling thread (same results: they do not depend on the thread count). */
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
#ifdef _OPENMP
    if (requested <= 1 || __atomic_load_n(&g_serial_only, __ATOMIC_RELAXED))
        return 1;
    __atomic_store_n(&g_used_threads, 1, __ATOMIC_RELAXED);
    return requested;
#else
    (void)requested;
    return 1;
#endif
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

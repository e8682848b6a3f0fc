/* The machine's float32 FMA peak, measured: each OpenMP thread runs independent chains of
 * vector fused multiply-adds (16 accumulators of the widest vectors -march=native gives,
 * enough to hide the FMA latency on two pipes) for `iters` steps; GFLOP/s = 2 * lanes * 16 *
 * iters * threads / seconds, the best of `reps`. The benchmarks report their rates as a share
 * of it, measured in the same run. */
#include <omp.h>

#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX__)
#define LANES 8
#else
#define LANES 4
#endif

typedef float vec __attribute__((vector_size(LANES * 4)));

double mg_fma_peak(int threads, long iters, int reps, float *sink)
{
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        double start = omp_get_wtime();
#pragma omp parallel num_threads(threads)
        {
            vec acc[16], a, b;
            for (int l = 0; l < LANES; ++l) {
                a[l] = 0.999999f;
                b[l] = 1e-7f;
            }
            for (int i = 0; i < 16; ++i)
                acc[i] = a * (float)i;
            for (long it = 0; it < iters; ++it)
#pragma GCC unroll 16
                for (int i = 0; i < 16; ++i)
                    acc[i] = acc[i] * a + b;
            float s = 0;
            for (int i = 0; i < 16; ++i)
                for (int l = 0; l < LANES; ++l)
                    s += acc[i][l];
            sink[omp_get_thread_num()] = s;
        }
        double seconds = omp_get_wtime() - start;
        if (seconds < best)
            best = seconds;
    }
    return 2.0 * LANES * 16.0 * (double)iters * threads / best / 1e9;
}

/* The float32 FMA peak of this machine, measured: each of `threads` OpenMP threads runs
 * ACCUMULATORS independent chains of vector fused multiply-adds (vectors of the widest
 * width -march=native gives GCC's vector extension, 64 bytes here: 16 lanes), enough chains
 * to hide the FMA latency on two pipes; FLOP counted as 2 per lane per FMA. Each thread times
 * its own loop and keeps its best of `reps` (so a thread started late or preempted between
 * runs does not count); the result is the sum of the threads' best rates, in GFLOP/s. */
#include <omp.h>

typedef float vec __attribute__((vector_size(64)));
#define LANES ((int)(sizeof(vec) / sizeof(float)))
#define ACCUMULATORS 12
#define MAX_THREADS 256

double mg_fma_peak(int threads, long iterations, int reps) {
    double best[MAX_THREADS];
    float sink = 0.0f;
    if (threads < 1 || threads > MAX_THREADS) return -1.0;
#pragma omp parallel num_threads(threads) reduction(+ : sink)
    {
        int me = omp_get_thread_num();
        vec acc[ACCUMULATORS], a, b;
        for (int l = 0; l < LANES; ++l) {
            a[l] = 0.999999f;
            b[l] = 1e-7f * (float)(me + 1);
        }
        best[me] = 1e30;
        for (int r = 0; r < reps; ++r) {
            for (int j = 0; j < ACCUMULATORS; ++j) acc[j] = b * (float)j;
            double start = omp_get_wtime();
            for (long i = 0; i < iterations; ++i)
                for (int j = 0; j < ACCUMULATORS; ++j) acc[j] = acc[j] * a + b;
            double seconds = omp_get_wtime() - start;
            if (seconds < best[me]) best[me] = seconds;
            for (int j = 0; j < ACCUMULATORS; ++j)
                for (int l = 0; l < LANES; ++l) sink += acc[j][l];
        }
    }
    if (sink == 12345.0f) return -1.0; /* uses the result */
    double total = 0.0;
    for (int t = 0; t < threads; ++t)
        total += 2.0 * LANES * ACCUMULATORS * (double)iterations / best[t] / 1e9;
    return total;
}

/* The float32 FMA peak of this machine, measured: each of `threads` OpenMP threads runs
 * ACCUMULATORS independent chains of vector fused multiply-adds (vectors of the widest
 * width -march=native gives GCC's vector extension, 64 bytes here: 16 lanes), enough chains
 * to hide the FMA latency on two pipes. FLOP counted as 2 per lane per FMA. Best of `reps`
 * timed runs, so the benchmarks can print "% of peak" against the machine they ran on. */
#include <omp.h>

typedef float vec __attribute__((vector_size(64)));
#define LANES ((int)(sizeof(vec) / sizeof(float)))
#define ACCUMULATORS 12

double mg_fma_peak(int threads, long iterations, int reps) {
    double best = 1e30;
    float sink = 0.0f;
    for (int r = 0; r < reps; ++r) {
        double start = omp_get_wtime();
#pragma omp parallel num_threads(threads) reduction(+ : sink)
        {
            vec acc[ACCUMULATORS], a, b;
            for (int l = 0; l < LANES; ++l) {
                a[l] = 0.999999f;
                b[l] = 1e-7f * (float)(omp_get_thread_num() + 1);
            }
            for (int j = 0; j < ACCUMULATORS; ++j) acc[j] = b * (float)j;
            for (long i = 0; i < iterations; ++i) {
                for (int j = 0; j < ACCUMULATORS; ++j) acc[j] = acc[j] * a + b;
            }
            for (int j = 0; j < ACCUMULATORS; ++j)
                for (int l = 0; l < LANES; ++l) sink += acc[j][l];
        }
        double seconds = omp_get_wtime() - start;
        if (seconds < best) best = seconds;
    }
    if (sink == 12345.0f) return -1.0; /* uses the result */
    return 2.0 * LANES * ACCUMULATORS * (double)iterations * threads / best / 1e9;
}

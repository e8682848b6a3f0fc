/* STREAM-style triad a[i] = b[i] + s*c[i] (float64, OpenMP), measured by the benchmarks
 * themselves so every table reports % of this machine's bandwidth in the same run.
 * Bytes counted as in STREAM: 24 per element (two reads, one write). */
#include <omp.h>
#include <stddef.h>

double mg_stream_triad(double *a, const double *b, const double *c, size_t n, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        double start = omp_get_wtime();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; ++i) a[i] = b[i] + 3.0 * c[i];
        double seconds = omp_get_wtime() - start;
        if (seconds < best) best = seconds;
    }
    return 24.0 * (double)n / best / 1e9; /* GB/s */
}

/* Baseline GEMM micro-kernels (any CPU): 4 rows x 32 columns (narrow: 8 rows x 16 columns),
 * each step one fmaf (rounded once, as the FMA instructions of the other ISAs, so results
 * match them bit for bit); the tail on the stored tile (gemm_tail.h). */
#include <math.h>

#include "gemm_internal.h"
#include "gemm_tail.h"

enum { MR = 4 };

enum { MR_NARROW = 8 };

/* A tile of R rows x W columns (W a constant per instantiation) */
static inline __attribute__((always_inline)) void
micro_body(int64_t kc, const float *const *rows, int64_t ks, const float *bp, float *c,
           int64_t ldc, int mr, int nr, int load, const int R, const int W)
{
    float acc[MR_NARROW][MG_GEMM_NR] = {{0}};
    gemm_prefetch_tile(c, ldc, mr, nr);
    if (load)
        for (int i = 0; i < mr; ++i)
            for (int j = 0; j < nr; ++j)
                acc[i][j] = c[i * ldc + j];
    for (int64_t k = 0, o = 0; k < kc; ++k, o += ks, bp += MG_GEMM_NR)
        for (int i = 0; i < R; ++i)
            for (int j = 0; j < W; ++j)
                acc[i][j] = fmaf(rows[i][o], bp[j], acc[i][j]);
    for (int i = 0; i < mr; ++i)
        for (int j = 0; j < nr; ++j)
            c[i * ldc + j] = acc[i][j];
}

static void gemm_micro_scalar(int64_t kc, const float *const *rows, int64_t ks, const float *bp,
                              float *c, int64_t ldc, int mr, int nr, int load)
{
    micro_body(kc, rows, ks, bp, c, ldc, mr, nr, load, MR, MG_GEMM_NR);
}

static void gemm_narrow_scalar(int64_t kc, const float *const *rows, int64_t ks, const float *bp,
                               float *c, int64_t ldc, int mr, int nr, int load)
{
    micro_body(kc, rows, ks, bp, c, ldc, mr, nr, load, MR_NARROW, GEMM_NR_NARROW);
}

static void gemm_micro_tail_scalar(int64_t kc, const float *const *rows, int64_t ks,
                                   const float *bp, float *c, int64_t ldc, int mr, int nr,
                                   int load, const gemm_tail *tail)
{
    gemm_micro_scalar(kc, rows, ks, bp, c, ldc, mr, nr, load);
    if (tail)
        gemm_tail_tile(tail, c, ldc, mr, nr);
}

static void gemm_narrow_tail_scalar(int64_t kc, const float *const *rows, int64_t ks,
                                    const float *bp, float *c, int64_t ldc, int mr, int nr,
                                    int load, const gemm_tail *tail)
{
    gemm_narrow_scalar(kc, rows, ks, bp, c, ldc, mr, nr, load);
    if (tail)
        gemm_tail_tile(tail, c, ldc, mr, nr);
}

const gemm_kernel_table gemm_kernels_scalar = {MR, gemm_micro_scalar, MR_NARROW,
                                               gemm_narrow_scalar, NULL,
                                               gemm_micro_tail_scalar, gemm_narrow_tail_scalar,
                                               NULL};

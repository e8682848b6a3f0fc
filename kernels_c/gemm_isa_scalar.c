/* Baseline GEMM micro-kernel (any CPU): 4 rows x 32 columns, each step one fmaf (rounded
 * once, as the FMA instructions of the other ISAs, so results match them bit for bit). */
#include <math.h>

#include "gemm_internal.h"

enum { MR = 4 };

static void gemm_micro_scalar(int64_t kc, const float *const *rows, int64_t ks, const float *bp, float *c,
                              int64_t ldc, int mr, int nr, int load)
{
    float acc[MR][MG_GEMM_NR] = {{0}};
    if (load)
        for (int i = 0; i < mr; ++i)
            for (int j = 0; j < nr; ++j)
                acc[i][j] = c[i * ldc + j];
    for (int64_t k = 0, o = 0; k < kc; ++k, o += ks, bp += MG_GEMM_NR)
        for (int i = 0; i < MR; ++i)
            for (int j = 0; j < MG_GEMM_NR; ++j)
                acc[i][j] = fmaf(rows[i][o], bp[j], acc[i][j]);
    for (int i = 0; i < mr; ++i)
        for (int j = 0; j < nr; ++j)
            c[i * ldc + j] = acc[i][j];
}

const gemm_kernel_table gemm_kernels_scalar = {MR, gemm_micro_scalar};

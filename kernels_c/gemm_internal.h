/* Internals of the GEMM: the driver (gemm.c) and the per-ISA micro-kernels (gemm_isa_*.c).
 *
 * A micro-kernel computes an mr x nr tile of C (mr <= its table's `mr`, nr <= MG_GEMM_NR) over
 * kc steps of k: A's element (i, k) is rows[i][k * ks] (A is read where it lies, no packing:
 * ks = 1 for a row-major A, m for a transposed one; the driver points rows past mr at the
 * last valid row, computed and not stored), bp is the packed B panel at the block's first k,
 * [kc][MG_GEMM_NR]; the sums start from
 * the floats in c when `load` (a later K block), else from +0, and go on as one fused
 * multiply-add per k in order; rows < mr and columns < nr are stored at c (row stride ldc). */
#ifndef MINIGRAPH_GEMM_INTERNAL_H
#define MINIGRAPH_GEMM_INTERNAL_H

#include <stdint.h>

#include "gemm.h"

typedef void (*gemm_micro_fn)(int64_t kc, const float *const *rows, int64_t ks,
                              const float *bp, float *c, int64_t ldc, int mr, int nr, int load);

#define GEMM_MR_MAX 12

typedef struct {
    int mr; /* rows of a micro-kernel tile (at most GEMM_MR_MAX, a divisor of GEMM_MC) */
    gemm_micro_fn micro;
} gemm_kernel_table;

extern const gemm_kernel_table gemm_kernels_scalar;
#if MG_X86
extern const gemm_kernel_table gemm_kernels_avx2, gemm_kernels_avx512;
#endif

/* The micro-kernels of the ISA in use (mg_isa_pick), for the GEMM drivers (gemm.c,
 * conv_gemm.c) */
const gemm_kernel_table *gemm_kernels(void);

#endif

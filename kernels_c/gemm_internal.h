/* Internals of the GEMM: the driver (gemm.c) and the per-ISA micro-kernels (gemm_isa_*.c).
 *
 * A micro-kernel computes an mr x nr tile of C (mr <= its table's `mr`, nr <= MG_GEMM_NR) over
 * kc steps of k: ap is the packed A block of the tile's rows, [kc][mr_max] (rows past mr are
 * zero), bp the packed B panel at the block's first k, [kc][MG_GEMM_NR]; the sums start from
 * the floats in c when `load` (a later K block), else from +0, and go on as one fused
 * multiply-add per k in order; rows < mr and columns < nr are stored at c (row stride ldc). */
#ifndef MINIGRAPH_GEMM_INTERNAL_H
#define MINIGRAPH_GEMM_INTERNAL_H

#include <stdint.h>

#include "gemm.h"

typedef void (*gemm_micro_fn)(int64_t kc, const float *ap, const float *bp, float *c,
                              int64_t ldc, int mr, int nr, int load);

typedef struct {
    int mr; /* rows of a micro-kernel tile (a divisor of GEMM_MC in gemm.c) */
    gemm_micro_fn micro;
} gemm_kernel_table;

extern const gemm_kernel_table gemm_kernels_scalar;
#if MG_X86
extern const gemm_kernel_table gemm_kernels_avx2, gemm_kernels_avx512;
#endif

#endif

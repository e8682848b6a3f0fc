/* Internals of the GEMM: the driver (gemm.c) and the per-ISA micro-kernels (gemm_isa_*.c).
 *
 * A micro-kernel computes an mr x nr tile of C (mr <= its table's `mr`, nr <= MG_GEMM_NR) over
 * kc steps of k: A's element (i, k) is rows[i][k * ks] (A is read where it lies, no packing:
 * ks = 1 for a row-major A, m for a transposed one; the driver points rows past mr at the
 * last valid row, computed and not stored), bp is the packed B panel at the block's first k,
 * [kc][MG_GEMM_NR]; the sums start from
 * the floats in c when `load` (a later K block), else from +0, and go on as one fused
 * multiply-add per k in order; rows < mr and columns < nr are stored at c (row stride ldc).
 *
 * Each table also has a narrow micro-kernel for nr <= GEMM_NR_NARROW (16) columns: same
 * arguments, same B layout (it reads the first 16 columns of each 32-float row of the panel,
 * so every packing serves both), same chain per element (bit for bit the wide kernel's
 * result), with more rows per tile (AVX-512: 24 rows in one zmm each) so that the FMAs of a
 * half-empty panel are not wasted (small-channel and grouped convolutions, whose panels hold
 * 8-16 columns). gemm_micro_for picks the kernel for a panel's width. */
#ifndef MINIGRAPH_GEMM_INTERNAL_H
#define MINIGRAPH_GEMM_INTERNAL_H

#include <stdint.h>

#include "gemm.h"

typedef void (*gemm_micro_fn)(int64_t kc, const float *const *rows, int64_t ks,
                              const float *bp, float *c, int64_t ldc, int mr, int nr, int load);

#define GEMM_MR_MAX 24
#define GEMM_NR_NARROW 16

typedef struct {
    int mr; /* rows of a micro-kernel tile (at most GEMM_MR_MAX, a divisor of GEMM_MC) */
    gemm_micro_fn micro;
    int mr_narrow; /* likewise for the narrow kernel (nr <= GEMM_NR_NARROW) */
    gemm_micro_fn narrow;
    /* NULL, or the narrow kernel over ntaps segments of kc steps of k in one call (segment
     * t's rows at rows[t * rstride], B read on from bp; the C tile stays in registers):
     * the same chains as ntaps calls of `narrow` */
    void (*narrow_taps)(int64_t ntaps, int64_t rstride, int64_t kc, const float *const *rows,
                        int64_t ks, const float *bp, float *c, int64_t ldc, int mr, int nr,
                        int load);
    /* NULL, or likewise for the wide kernel `micro` (a tile of up to `mr` rows, any nr) */
    void (*micro_taps)(int64_t ntaps, int64_t rstride, int64_t kc, const float *const *rows,
                       int64_t ks, const float *bp, float *c, int64_t ldc, int mr, int nr,
                       int load);
} gemm_kernel_table;

/* The micro-kernel for tiles nr columns wide, its rows per tile in *mr */
static inline gemm_micro_fn gemm_micro_for(const gemm_kernel_table *t, int nr, int *mr)
{
    *mr = nr <= GEMM_NR_NARROW ? t->mr_narrow : t->mr;
    return nr <= GEMM_NR_NARROW ? t->narrow : t->micro;
}

extern const gemm_kernel_table gemm_kernels_scalar;
#if MG_X86
extern const gemm_kernel_table gemm_kernels_avx2, gemm_kernels_avx512;
#endif

/* The micro-kernels of the ISA in use (mg_isa_pick), for the GEMM drivers (gemm.c,
 * conv_gemm.c) */
const gemm_kernel_table *gemm_kernels(void);

#endif

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
 * 8-16 columns). gemm_micro_for picks the kernel for a panel's width.
 *
 * The *_tail variants take a gemm_tail as well (NULL: none): the epilogue of a finished
 * tile (the item's last K block), applied to the sums before they are stored (AVX-512: in
 * the registers; the other ISAs: on the stored tile while it is in L1, gemm_tail.h), stage
 * by stage as mg_channel_epilogue rounds them, so bit for bit the unfused epilogue. Every
 * micro-kernel also prefetches its C tile (for writing) before its first k step: with a
 * short K (a 1x1 convolution of 64-128 channels) the stores' misses otherwise stall it. */
#ifndef MINIGRAPH_GEMM_INTERNAL_H
#define MINIGRAPH_GEMM_INTERNAL_H

#include <stdint.h>

#include "gemm.h"

typedef void (*gemm_micro_fn)(int64_t kc, const float *const *rows, int64_t ks,
                              const float *bp, float *c, int64_t ldc, int mr, int nr, int load);

/* The epilogue stages of one tile (mg_epilogue at the tile: vectors at its first column,
 * residual at its first element with row stride ldr) */
typedef struct {
    const float *bias, *mean, *k, *offset, *residual;
    int64_t ldr;
    int activation; /* 0 none, 1 Relu, 2 Relu6 */
} gemm_tail;

typedef void (*gemm_micro_tail_fn)(int64_t kc, const float *const *rows, int64_t ks,
                                   const float *bp, float *c, int64_t ldc, int mr, int nr,
                                   int load, const gemm_tail *tail);
typedef void (*gemm_taps_tail_fn)(int64_t ntaps, int64_t rstride, int64_t kc,
                                  const float *const *rows, int64_t ks, const float *bp,
                                  float *c, int64_t ldc, int mr, int nr, int load,
                                  const gemm_tail *tail);

typedef void (*gemm_segs_fn)(int64_t nseg, int64_t rstride, const int64_t *kcs,
                             const float *const *rows, int64_t ks, const float *bp, float *c,
                             int64_t ldc, int mr, int nr, int load);

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
    /* the same three with a tail (narrow_taps_tail NULL where narrow_taps is) */
    gemm_micro_tail_fn micro_tail, narrow_tail;
    gemm_taps_tail_fn narrow_taps_tail;
    /* NULL, or likewise for the wide kernel `micro` (a tile of up to `mr` rows, any nr) */
    void (*micro_taps)(int64_t ntaps, int64_t rstride, int64_t kc, const float *const *rows,
                       int64_t ks, const float *bp, float *c, int64_t ldc, int mr, int nr,
                       int load);
    /* NULL, or micro_taps / narrow_taps with segments of their own lengths: segment t runs
     * kcs[t] steps of k (the same chains as one call of `micro` / `narrow` per segment),
     * reading rows[t * rstride + i] for i < mr only */
    gemm_segs_fn micro_segs, narrow_segs;
    /* 1: every kernel of the table reads rows[i] for i < mr only (the driver need not point
     * the rows past mr anywhere); 0: up to its own tile height */
    int exact_rows;
} gemm_kernel_table;

/* The micro-kernel for tiles nr columns wide, its rows per tile in *mr */
static inline gemm_micro_fn gemm_micro_for(const gemm_kernel_table *t, int nr, int *mr)
{
    *mr = nr <= GEMM_NR_NARROW ? t->mr_narrow : t->mr;
    return nr <= GEMM_NR_NARROW ? t->narrow : t->micro;
}

/* The tail kernel for tiles nr columns wide, its rows per tile in *mr */
static inline gemm_micro_tail_fn gemm_micro_tail_for(const gemm_kernel_table *t, int nr,
                                                     int *mr)
{
    *mr = nr <= GEMM_NR_NARROW ? t->mr_narrow : t->mr;
    return nr <= GEMM_NR_NARROW ? t->narrow_tail : t->micro_tail;
}

/* The tail of the tile at channel ch0 whose first element is y[at] (row stride ld), in *t;
 * NULL when there is no epilogue */
static inline const gemm_tail *gemm_tail_at(const mg_epilogue *e, int64_t ch0, int64_t at,
                                            int64_t ld, gemm_tail *t)
{
    if (!e)
        return NULL;
    t->bias = e->bias ? e->bias + ch0 : NULL;
    t->mean = e->mean ? e->mean + ch0 : NULL;
    t->k = e->k ? e->k + ch0 : NULL;
    t->offset = e->offset ? e->offset + ch0 : NULL;
    t->residual = e->residual ? e->residual + at : NULL;
    t->ldr = ld;
    t->activation = e->activation;
    return t;
}

/* Rows per M block: m cut into ceil(m / most) blocks of equal size (to a multiple of 4 rows,
 * at most `most`, a multiple of 4), so that the items of the last blocks are not a sliver
 * beside whole ones (at M = 128: 64 + 64, not 96 + 32) and the threads finish together */
static inline int64_t gemm_block_rows(int64_t m, int64_t most)
{
    const int64_t blocks = (m + most - 1) / most, rows = (m + blocks - 1) / blocks;
    return (rows + 3) / 4 * 4;
}

/* Whether rows of A `stride_bytes` apart, read side by side by a micro-kernel, crowd one L1
 * set: an L1 of 64 sets of 64-byte lines (32 KiB 8-way, 48 KiB 12-way) puts rows a multiple
 * of 4 KiB apart all into one set, where a 12-row tile's lines and the B panel's evict each
 * other before their next k. Measured (Zen 4, one thread, CPU time): a GEMM with K = 1024
 * ran 86-89 GFLOP/s, with K = 1008 or 1040 98; copying the rows per K block gave 99; rows
 * 2 KiB apart (two sets) lost 2-9 % to the copy, so they are read in place. Such rows are
 * copied into a scratch whose row stride (GEMM_COPY_LD floats) is no such multiple. */
static inline int gemm_rows_crowd_l1(int64_t stride_bytes)
{
    return stride_bytes % 4096 == 0;
}

/* Row stride of a K block's copied rows: 256 floats and a line (no multiple of 2 KiB) */
#define GEMM_COPY_LD (256 + 16)

/* A C tile's lines, prefetched for writing (mr rows of nr floats from c, row stride ldc) */
static inline void gemm_prefetch_tile(float *c, int64_t ldc, int mr, int nr)
{
    for (int i = 0; i < mr; ++i) {
        __builtin_prefetch(c + i * ldc, 1, 3);
        __builtin_prefetch(c + i * ldc + nr - 1, 1, 3);
    }
}

extern const gemm_kernel_table gemm_kernels_scalar;
#if MG_X86
extern const gemm_kernel_table gemm_kernels_avx2, gemm_kernels_avx512;
#endif

/* The micro-kernels of the ISA in use (mg_isa_pick), for the GEMM drivers (gemm.c,
 * conv_gemm.c) */
const gemm_kernel_table *gemm_kernels(void);

#endif

/* Internals of the pooling kernels: the driver (pooling.c) and the per-ISA loops
 * (pooling_isa_*.c, instantiating pooling_template.h) meet here: the geometry of a call,
 * its window helpers and the table of one ISA.
 */
#ifndef MINIGRAPH_POOLING_INTERNAL_H
#define MINIGRAPH_POOLING_INTERNAL_H

#include <stdint.h>

#include "mg_runtime.h"

typedef struct {
    const float *x, *g;
    float *y, *dx;
    int64_t h, w, c, kh, kw, sh, sw, pt, pl, oh, ow;
} pool_geo;

/* Output row `row` (image *img, output y = row % oh) reads input rows [*ya, *yb): its window
 * clipped to the image. */
static inline void window_rows(const pool_geo *g, int64_t row, int64_t *img, int64_t *ya,
                               int64_t *yb)
{
    *img = row / g->oh;
    const int64_t top = (row % g->oh) * g->sh - g->pt, bottom = top + g->kh;
    *ya = top < 0 ? 0 : top;
    *yb = bottom > g->h ? g->h : bottom;
}

/* Output column ox reads input columns [*xa, *xb): its window clipped to the image. */
static inline void window_cols(const pool_geo *g, int64_t ox, int64_t *xa, int64_t *xb)
{
    const int64_t left = ox * g->sw - g->pl, right = left + g->kw;
    *xa = left < 0 ? 0 : left;
    *xb = right > g->w ? g->w : right;
}

/* best = v where v > best or v is NaN (numpy.maximum-like: NaN propagates) */
static inline float max_nan(float best, float v) { return (v > best || v != v) ? v : best; }

/* Output rows [lo, hi) of a call (row = image * out_h + y); NCHW tensors come as n * c
 * single-channel NHWC images (c == 1). */
typedef void (*pool_rows_fn)(const pool_geo *g, int64_t lo, int64_t hi);

/* One table per ISA (pooling_template.h) */
typedef struct {
    pool_rows_fn max_pool;      /* y: each window's maximum                                 */
    pool_rows_fn max_pool_grad; /* dx: g at each window's first maximum, +0 elsewhere      */
} pool_kernel_table;

extern const pool_kernel_table pool_kernels_scalar;
#if MG_X86
extern const pool_kernel_table pool_kernels_avx2, pool_kernels_avx512;
#endif

#endif

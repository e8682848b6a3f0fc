/* Internals of the pooling kernels: the driver (pooling.c) and the per-ISA loops
 * (pooling_isa_*.c, instantiating pooling_template.h) meet here: the geometry of a call,
 * its window helpers and the table of one ISA.
 */
#ifndef MINIGRAPH_POOLING_INTERNAL_H
#define MINIGRAPH_POOLING_INTERNAL_H

#include <float.h>
#include <stdint.h>

#include "mg_runtime.h"

typedef struct {
    const float *x, *g;
    float *y, *dx;
    int64_t *arg; /* overlapping max-pool gradients: each output's argmax, yy * w + xx */
    int64_t h, w, c, kh, kw, sh, sw, pt, pl, oh, ow;
    int relu; /* max-pool gradients: x is a Relu's output and dx gets ReluGrad's mask */
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

/* Outputs [*in0, *in1) of a row have whole windows along the width (none clipped by the left
 * or right edge): ox * sw - pl >= 0 and ox * sw - pl + kw <= w; an empty range when none do */
static inline void whole_cols(const pool_geo *g, int64_t *in0, int64_t *in1)
{
    const int64_t first = (g->pl + g->sw - 1) / g->sw;
    int64_t end = g->w - g->kw + g->pl < 0 ? 0 : (g->w - g->kw + g->pl) / g->sw + 1;
    end = end > g->ow ? g->ow : end;
    *in0 = first;
    *in1 = end < first ? first : end;
}

/* The outputs whose windows cover input index i along one axis (size n, window k, stride s,
 * leading pad p, `out` outputs): [*lo, *hi), possibly empty */
static inline void covering(int64_t i, int64_t k, int64_t s, int64_t p, int64_t out,
                            int64_t *lo, int64_t *hi)
{
    const int64_t first = i + p - k + 1, last = i + p; /* o * s in [first, last] */
    *lo = first <= 0 ? 0 : (first + s - 1) / s;
    const int64_t end = last / s + 1;
    *hi = end < out ? end : out;
}

/* In-bounds elements of a window along one axis: min(start + k, n) - max(start, 0) */
static inline int64_t window_count(int64_t o, int64_t k, int64_t s, int64_t p, int64_t n)
{
    const int64_t start = o * s - p, end = start + k;
    return (end < n ? end : n) - (start > 0 ? start : 0);
}

/* TF's max-pool step (MaxPool, MaxPool3D on CPU): best = v only where v > best, from
 * best = POOL_LOWEST. NaN never wins (v > best is false), ties keep the first element
 * (-0 then +0 gives -0), -inf never beats the start, and a window of NaN and -inf only
 * gives -FLT_MAX. The forward max pools only; the gradients keep their argmax rule. */
#define POOL_LOWEST (-FLT_MAX)
static inline float pool_max(float best, float v) { return v > best ? v : best; }

/* What the max-pool gradient stores at an element whose input is x, given the gradient v
 * routed there: v itself, or with g->relu ReluGrad(v, x) = x > 0 ? v : v * 0 (so an
 * infinite or NaN v where x <= 0 or NaN gives NaN and a negative one -0, as the unfused
 * ReluGrad). */
static inline float relu_gate(const pool_geo *g, float v, float x)
{
    return g->relu && !(x > 0.0f) ? v * 0.0f : v;
}

/* Output rows [lo, hi) of a call (row = image * out_h + y); NCHW tensors come as n * c
 * single-channel NHWC images (c == 1). */
typedef void (*pool_rows_fn)(const pool_geo *g, int64_t lo, int64_t hi);

/* One table per ISA (pooling_template.h). The *_in entries run over input rows
 * (image * h + y) and gather what the outputs send there: no two threads write one element,
 * and each element adds its contributions in a fixed order. */
typedef struct {
    pool_rows_fn max_pool;      /* y: each window's maximum                                 */
    pool_rows_fn max_pool_grad; /* dx: g at each window's first maximum, +0 elsewhere      */
    pool_rows_fn max_pool_arg;  /* arg: each window's first maximum (overlapping windows)  */
    pool_rows_fn max_pool_grad_in; /* dx from arg and g (overlapping windows)             */
    pool_rows_fn max_pool_grad_images; /* the same by scatter over images [lo, hi)      */
    pool_rows_fn avg_pool;      /* y: each window's mean                                    */
    pool_rows_fn avg_pool_grad_in; /* dx: each covering window's g / count, added up       */
} pool_kernel_table;

extern const pool_kernel_table pool_kernels_scalar;
#if MG_X86
extern const pool_kernel_table pool_kernels_avx2, pool_kernels_avx512;
#endif

#endif

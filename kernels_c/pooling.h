/* minigraph native pooling kernels (float32): public C API.
 *
 * Tensors are C-contiguous float32, NHWC (`channels_last` != 0) or NCHW; input
 * [n, h, w, c], output [n, out_h, out_w, c] (NHWC terms). Output (y, x) covers input rows
 * y * sh - pad_top .. + kh - 1 and columns x * sw - pad_left .. + kw - 1, in bounds only
 * (TF's SAME / VALID geometry; no window may be empty). MaxPool propagates NaN like
 * numpy.maximum. MaxPoolGrad routes each output's gradient to the FIRST maximum of its window
 * in row-major order (a later element replaces the maximum only when strictly greater, as
 * TF's CPU kernel). Non-overlapping windows (sh >= kh, sw >= kw) give every input element at
 * most one gradient (0 + g); with overlapping ones each input element gathers +0 plus the
 * gradients of the outputs whose first maximum it is, from the last output to the first
 * (row-major): the numpy kernel's order, so the same bits. AvgPool: each window's sum over
 * its in-bounds elements, column by column (+0 plus each column's sum from +0, top to
 * bottom), divided by their count (padding is not counted, as TF). AvgPoolGrad: each input
 * element gets +0 plus, from the last covering output row to the first, that row's covering
 * outputs' g / count added from the last column to the first (from +0): the adjoint, in the
 * numpy kernel's order (its passes: height then width forward, width then height back), so
 * both are its results bit for bit. Every element is written by one thread in a fixed
 * order: the same bits for any thread count.
 *
 * Return value (mg_runtime.h): MG_OK, MG_ENOMEM (the overlapping max-pool gradient's argmax
 * scratch), or MG_EINVAL. `num_threads` <= 1: the calling thread.
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_POOLING_H
#define MINIGRAPH_POOLING_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
int mg_max_pool(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                int64_t out_w, int channels_last, const float *x, float *y, int num_threads);

int mg_max_pool_grad(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                     int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                     int64_t out_w, int channels_last, const float *x, const float *g,
                     float *dx, int num_threads);

/* The two ops of a Relu -> MaxPool chain in one pass over x: r = Relu(x) (x > 0 ? x : +0,
 * NaN stays NaN) and y = MaxPool(r), computed as Relu(MaxPool(x)) (the same bits: both are
 * the window's last NaN where it has one, else its maximum where that is > 0, else +0);
 * r has x's shape, y the pool's. */
int mg_relu_max_pool(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                     int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                     int64_t out_w, int channels_last, const float *x, float *y, float *r,
                     int num_threads);

/* MaxPoolGrad -> ReluGrad in one pass: mg_max_pool_grad of the pool of r (a Relu's output)
 * with ReluGrad's mask applied in the same store, dx = r > 0 ? routed : routed * 0. */
int mg_max_pool_grad_relu(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                          int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left,
                          int64_t out_h, int64_t out_w, int channels_last, const float *r,
                          const float *g, float *dx, int num_threads);

int mg_avg_pool(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                int64_t out_w, int channels_last, const float *x, float *y, int num_threads);

/* g: the pool's output gradient; dx: the input's [n, h, w, c] (NHWC terms) */
int mg_avg_pool_grad(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                     int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                     int64_t out_w, int channels_last, const float *g, float *dx,
                     int num_threads);
/* END CDEF */

#endif

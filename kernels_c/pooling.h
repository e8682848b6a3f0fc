/* minigraph native max pooling kernels (float32): public C API.
 *
 * Tensors are C-contiguous float32, NHWC (`channels_last` != 0) or NCHW; input
 * [n, h, w, c], output [n, out_h, out_w, c] (NHWC terms). Output (y, x) covers input rows
 * y * sh - pad_top .. + kh - 1 and columns x * sw - pad_left .. + kw - 1, in bounds only
 * (TF's SAME / VALID geometry; no window may be empty). MaxPool propagates NaN like
 * numpy.maximum. MaxPoolGrad routes each output's gradient to the FIRST maximum of its window
 * in row-major order (a later element replaces the maximum only when strictly greater, as
 * TF's CPU kernel); it needs non-overlapping windows (sh >= kh, sw >= kw), so every input
 * element gets at most one gradient (0 + g, exactly as the numpy kernel computes it).
 *
 * Return value (mg_runtime.h): MG_OK, or MG_EINVAL. `num_threads` <= 1: the calling thread.
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
/* END CDEF */

#endif

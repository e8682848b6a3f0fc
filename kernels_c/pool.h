/* minigraph native max pooling, ReLU and Adam kernels (float32): public C API.
 *
 * Pools: tensors are C-contiguous float32, NHWC (`channels_last` != 0) or NCHW; input
 * [n, h, w, c], output [n, out_h, out_w, c] (NHWC terms). Output (y, x) covers input rows
 * y * sh - pad_top .. + kh - 1 and columns x * sw - pad_left .. + kw - 1, in bounds only
 * (TF's SAME / VALID geometry; no window may be empty). MaxPool propagates NaN like
 * numpy.maximum. MaxPoolGrad routes each output's gradient to the FIRST maximum of its window
 * in row-major order (a later element replaces the maximum only when strictly greater, as
 * TF's CPU kernel); it needs non-overlapping windows (sh >= kh, sw >= kw), so every input
 * element gets at most one gradient (0 + g, exactly as the numpy kernel computes it).
 *
 * Relu: y = x > 0 ? x : +0, and NaN stays NaN (as numpy.maximum(x, 0)).
 * ReluGrad: dx = features > 0 ? g : +0.
 * ApplyAdam (one variable): m' = m + (g - m) * (1 - beta1), v' = v + (g^2 - v) * (1 - beta2),
 * var' = var - lr_t * s / (sqrt(v') + epsilon), s = m' (or beta1 * m' + (1 - beta1) * g with
 * Nesterov); lr_t is computed by the caller. Writes new arrays (the inputs are not changed).
 *
 * Return value (mg_runtime.h): MG_OK, or MG_EINVAL. `num_threads` <= 1: the calling thread.
 */
#ifndef MINIGRAPH_POOL_H
#define MINIGRAPH_POOL_H

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

int mg_relu(int64_t count, const float *x, float *y, int num_threads);

int mg_relu_grad(int64_t count, const float *g, const float *features, float *dx,
                 int num_threads);

int mg_apply_adam(int64_t count, const float *var, const float *m, const float *v,
                  const float *grad, float lr_t, float beta1, float beta2, float epsilon,
                  int use_nesterov, float *var_out, float *m_out, float *v_out);
/* END CDEF */

#endif

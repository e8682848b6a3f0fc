/* minigraph native float32 window sums along one axis: the passes the 3-D average pools
 * (AvgPool3D, AvgPool3DGrad) are made of, in the numpy kernels' order (backends/
 * pooling_kernels.py, Pool.reduce and Pool.spread), bit for bit.
 *
 * A tensor is seen as [outer][n][inner] (the pooled axis of length n in the middle). Output
 * p of a window (k, stride s, leading pad `before`) covers the inputs r = i + s*p - before
 * for the offsets i in [0, k) with 0 <= r < n.
 *
 *   mg_window_sum:    y[o][p][j] = ((+0 + x[o][r0][j]) + x[o][r1][j]) + ...  over the
 *                     covered r in increasing order (y is [outer][out][inner]);
 *   mg_window_spread: dx[o][r][j] = ((+0 + g[o][p0][j]) + g[o][p1][j]) + ... over the
 *                     outputs p covering r in decreasing order (the adjoint of the sum).
 *
 * One rounding per addition, in that order, whatever the thread count. Return value
 * (mg_runtime.h): MG_OK, or MG_EINVAL for negative sizes, k or s below 1, or a NULL buffer.
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_WINDOW_PASS_H
#define MINIGRAPH_WINDOW_PASS_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
int mg_window_sum(int64_t outer, int64_t n, int64_t inner, int64_t k, int64_t stride,
                  int64_t before, int64_t out, const float *x, float *y, int num_threads);
int mg_window_spread(int64_t outer, int64_t n, int64_t inner, int64_t k, int64_t stride,
                     int64_t before, int64_t out, const float *g, float *dx, int num_threads);
/* END CDEF */

#endif

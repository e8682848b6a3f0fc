/* minigraph native float32 MaxPool3DGrad with TF's CPU rule and MaxPool3DGradGrad
 * (backends/volumetric_kernels.py, max_pool3d_grad and max_pool3d_grad_grad: bit for bit).
 *
 * NDHWC tensors: x [n][d][h][w][c], y = orig_output and g [n][od][oh][ow][c], dx like x.
 * Output o covers the inputs o * stride - pad + a for a in [0, k), per spatial dim. Every
 * element of x within TOL = 1e-5f of a covering output's y (|x - y| < TOL in float32; NaN
 * and inf - inf never tie) receives that output's g:
 *
 *   dx[i] = ((+0 + g[o1]) + g[o2]) + ...  over the tying covering outputs o, ordered by
 *           width index (outermost), then height, then planes, each increasing
 *           (TF's order: window offsets decreasing).
 *
 * One rounding per addition in that order, whatever the thread count.
 *
 * MaxPool3DGradGrad: out[o] = g[i] for the first in-bounds element i of o's window
 * (row-major: planes, height, width) with x[i] == y[o] exactly, else +0 (out like y, g like
 * x). Return value
 * (mg_runtime.h): MG_OK, or MG_EINVAL for negative sizes, a window or stride below 1, or a
 * NULL buffer.
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_POOL3D_GRAD_H
#define MINIGRAPH_POOL3D_GRAD_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
/* sizes: {n, c, in[3], k[3], stride[3], pad[3] (before), out[3]} */
int mg_max_pool3d_grad(const int64_t sizes[17], const float *x, const float *y,
                       const float *g, float *dx, int num_threads);
int mg_max_pool3d_grad_grad(const int64_t sizes[17], const float *x, const float *y,
                            const float *g, float *out, int num_threads);
/* END CDEF */

#endif

/* minigraph native depthwise 2-D convolution kernels (float32, NHWC): public C API.
 *
 * TF's DepthwiseConv2dNative and its two backprops. Tensors are C-contiguous float32:
 * input x [n, h, w, c], filter f [kh, kw, c, mult], output y [n, out_h, out_w, c * mult]
 * with output channel c * mult + m. Any strides (sh, sw >= 1), dilations (dh, dw >= 1) and
 * non-negative top/left pads (SAME, VALID or EXPLICIT as TF computes them): output pixel
 * (p, q) reads input row p * sh + i * dh - pad_top and column q * sw + j * dw - pad_left
 * for tap (i, j); taps outside the input are skipped (not multiplied by zero).
 *
 * Rounding is TensorFlow's (oneDNN's float32 kernels): every sum is a chain of fused
 * multiply-adds from +0 in a fixed order, the same for every ISA and thread count, so the
 * results are bit-identical to the numpy kernels (backends/convolution_kernels.py):
 *   forward      y  = sum over taps (i, j) row-major of x * f;
 *   input grad   dx = sum over taps (i, j) row-major, then m, of dy * f;
 *   filter grad  df = per image, the sum over output pixels row-major of x * dy; the
 *                     images' sums then added in image order.
 *
 * Return value (mg_runtime.h): MG_OK, MG_EINVAL for bad sizes (a geometry value below its
 * minimum or above 2^31 - 1, a NULL buffer), MG_ENOMEM when a scratch allocation failed.
 * `num_threads` <= 1 runs on the calling thread.
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_DEPTHWISE_H
#define MINIGRAPH_DEPTHWISE_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
/* y = depthwise(x, f): x [n,h,w,c], f [kh,kw,c,mult], y [n,out_h,out_w,c*mult]. */
int mg_depthwise_forward(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                         int64_t mult, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                         int64_t pad_top, int64_t pad_left, int64_t out_h, int64_t out_w,
                         const float *x, const float *f, float *y, int num_threads);

/* dx [n,h,w,c] = d depthwise / d x given dy [n,out_h,out_w,c*mult]. */
int mg_depthwise_backprop_input(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                                int64_t kw, int64_t mult, int64_t sh, int64_t sw, int64_t dh,
                                int64_t dw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                                int64_t out_w, const float *f, const float *dy, float *dx,
                                int num_threads);

/* df [kh,kw,c,mult] = d depthwise / d f given x [n,h,w,c] and dy [n,out_h,out_w,c*mult]. */
int mg_depthwise_backprop_filter(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                                 int64_t kw, int64_t mult, int64_t sh, int64_t sw,
                                 int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left,
                                 int64_t out_h, int64_t out_w, const float *x,
                                 const float *dy, float *df, int num_threads);
/* END CDEF */

#endif

/* minigraph native gradients of a 2-D convolution (float32) on the GEMM micro-kernels
 * (gemm_internal.h): Conv2DBackpropInput and Conv2DBackpropFilter for any strides,
 * dilations, non-negative pads (SAME / VALID / EXPLICIT as the caller computed them) and
 * groups, in one call per op.
 *
 * Tensors are C-contiguous float32 NHWC (the caller transposes NCHW): x and dx [n][h][w][c],
 * dy [n][out_h][out_w][co], the filter and its gradient HWIO [kh][kw][c / groups][co]. Group g
 * is input channels g * cig .. (g + 1) * cig - 1 (cig = c / groups) and output channels
 * g * cog .. (g + 1) * cog - 1 (cog = co / groups). Output pixel (p, q) reads input pixel
 * (p * stride_h + i * dilation_h - pad_top, q * stride_w + j * dilation_w - pad_left) through
 * tap (i, j) (zero outside x):
 *
 *   dx[n, r, s, g*cig + c] = sum over taps (i, j), then o, of dy[n, p, q, g*cog + o] *
 *                            f[i, j, c, g*cog + o]  where r = p*sh + i*dh - pt, s = ...;
 *   df[i, j, c, g*cog + o] = sum over pixels (n, p, q) of x[n, r, s, g*cig + c] *
 *                            dy[n, p, q, g*cog + o].
 *
 * Summation order (fixed by the shapes; bit-identical for any thread count):
 *   - input gradient: one chain of fused multiply-adds from +0 over the taps (i, j) that
 *     reach the element, i ascending and within a filter row j descending, and within a
 *     tap over o = 0 .. cog - 1 (a tap that reaches another pixel of the element's tile, a
 *     fixed function of the shapes and the ISA, adds 0 * f terms to the chain: they change
 *     no finite sum but the sign of a zero, and make a NaN where that f is infinite);
 *   - filter gradient: the output pixels (n, p, q) in row-major order are cut into `chunks`
 *     ranges of whole output rows (a number that depends on the shapes only:
 *     mg_conv2d_gemm_filter_chunks); each range is one chain of fused multiply-adds from +0
 *     in pixel order (taps outside x add 0 * dy terms), and the ranges' sums are added in
 *     range order.
 * Error bound (recursive summation, K terms: K = taps * cog, or the pixel count):
 * |result - exact| <= K * 2^-24 * sum |a * b| (1 + O(K 2^-24)).
 *
 * Return value (mg_runtime.h): MG_OK, MG_EINVAL (negative sizes, groups not dividing the
 * channels, a stride or dilation below 1, a NULL buffer), MG_ENOMEM (scratch).
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_CONV_GEMM_GRAD_H
#define MINIGRAPH_CONV_GEMM_GRAD_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
/* dx [n,h,w,c] = d conv / d x given f [kh,kw,c/groups,co] and dy [n,out_h,out_w,co]. */
int mg_conv2d_gemm_backprop_input(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                                  int64_t kw, int64_t co, int64_t groups, int64_t stride_h,
                                  int64_t stride_w, int64_t dilation_h, int64_t dilation_w,
                                  int64_t pad_top, int64_t pad_left, int64_t out_h,
                                  int64_t out_w, const float *f, const float *dy, float *dx,
                                  int num_threads);

/* df [kh,kw,c/groups,co] = d conv / d f given x [n,h,w,c] and dy [n,out_h,out_w,co]. */
int mg_conv2d_gemm_backprop_filter(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                                   int64_t kw, int64_t co, int64_t groups, int64_t stride_h,
                                   int64_t stride_w, int64_t dilation_h, int64_t dilation_w,
                                   int64_t pad_top, int64_t pad_left, int64_t out_h,
                                   int64_t out_w, const float *x, const float *dy, float *df,
                                   int num_threads);

/* The number of ranges of output rows the filter gradient sums apart (see the summation
 * order): a function of the shapes only. */
int64_t mg_conv2d_gemm_filter_chunks(int64_t n, int64_t out_h, int64_t out_w, int64_t groups,
                                     int64_t kh, int64_t kw, int64_t c, int64_t co);
/* END CDEF */

#endif

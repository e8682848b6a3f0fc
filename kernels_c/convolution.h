/* minigraph native 2-D convolution kernels (float32): public C API.
 *
 * Dilation 1, strides in the forward (1 for the gradients), any kernel size, non-negative
 * top/left pads (SAME or VALID as TF computes them). Tensors are C-contiguous float32: the
 * input and output in NHWC (`channels_last` != 0) or NCHW, the filter (and its gradient) in
 * HWIO. Sizes: input [n, h, w, c], filter [kh, kw, c, co], output [n, out_h, out_w, co] (NHWC
 * terms), where output pixel (y, x) reads input rows y * stride - pad_top .. y * stride -
 * pad_top + kh - 1 (zero outside).
 *
 * Direct convolution: no im2col matrix. Register-blocked micro-kernels (AVX-512: up to 64
 * output channels in 4 vectors, 6-12 pixels or filter rows per tile; AVX2 and baseline
 * versions too) run over tiles that the worker pool's threads take in groups; the forward
 * tiles read the NHWC input itself (NCHW: a zero-padded NHWC copy), each tile only the taps
 * its pixels read inside the input (the filter gradient pads the whole input once).
 * Every output element is summed in an order fixed by the shape (taps inside the input, in
 * order, for the forward and input gradient: one tile's chain, with the bits of a chain over
 * all taps whose padding taps add 0 * w, for a finite filter; for the filter gradient,
 * pixels image by image, in
 * one chain or, when its tiles are few, in a shape-fixed number of groups of consecutive
 * output rows added in order), so results are bit-identical for any thread count.
 *
 * Return value (mg_runtime.h): MG_OK, MG_EINVAL for bad sizes, MG_ENOMEM when a scratch
 * allocation failed. `num_threads` <= 1 runs on the calling thread.
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_CONVOLUTION_H
#define MINIGRAPH_CONVOLUTION_H

#include <stdint.h>

#include "activations.h"
#include "mg_runtime.h"

/* BEGIN CDEF */
/* y = conv(x, f): x [n,h,w,c], f [kh,kw,c,co], y [n,out_h,out_w,co]; output pixel (p, q)
 * reads input rows p * stride_h - pad_top + i, columns q * stride_w - pad_left + j. With an
 * `epilogue`
 * (NULL: none; NHWC only, else MG_EINVAL), its stages (activations.h) are applied to each
 * tile in registers before it is stored: y = epilogue(conv(x, f)), bit for bit what
 * mg_channel_epilogue on the convolution's result gives, without another pass over y. */
int mg_conv2d_forward(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                      int64_t co, int64_t stride_h, int64_t stride_w, int64_t pad_top,
                      int64_t pad_left, int64_t out_h, int64_t out_w, int channels_last,
                      const float *x, const float *f, float *y, const mg_epilogue *epilogue,
                      int num_threads);

/* dx = d conv / d x given dy [n,out_h,out_w,co]; dx [n,h,w,c]. Needs pad_top < kh and
 * pad_left < kw (always true for SAME and VALID). */
int mg_conv2d_backprop_input(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                             int64_t kw, int64_t co, int64_t pad_top, int64_t pad_left,
                             int64_t out_h, int64_t out_w, int channels_last, const float *f,
                             const float *dy, float *dx, int num_threads);

/* df = d conv / d f given x [n,h,w,c] and dy [n,out_h,out_w,co]; df [kh,kw,c,co]. */
int mg_conv2d_backprop_filter(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                              int64_t kw, int64_t co, int64_t pad_top, int64_t pad_left,
                              int64_t out_h, int64_t out_w, int channels_last,
                              const float *x, const float *dy, float *df, int num_threads);
/* END CDEF */

#endif

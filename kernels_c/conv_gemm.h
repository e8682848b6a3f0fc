/* minigraph native float32 2-D convolution forward as an implicit GEMM (NHWC): no im2col copy.
 *
 * y[M = n * out_h * out_w][co] = A * B, where row m = (image, p, q) of A is output pixel
 * (p, q)'s receptive field, read where it lies in x:
 *   y[img, p, q, g * cog + o] = sum_{i, j, ci} x[img, p * stride_h - pad_top + i * dilation_h,
 *                                                q * stride_w - pad_left + j * dilation_w,
 *                                                g * cg + ci] * f[i, j, ci, g * cog + o]
 * (zero outside x; cg = c / groups input and cog = co / groups output channels per group g),
 * and B is the HWIO filter seen as [kh * kw * cg][co], packed per group by mg_gemm_pack_b
 * (gemm.h): group g's [kh * kw * cg][cog] column block at g * mg_gemm_packed_floats(kh * kw
 * * cg, cog) floats. The GEMM's micro-kernels (gemm_internal.h) read A through row pointers,
 * so a K block points each row at its pixel's channel run in x (or at zeros for a tap in the
 * padding): K is blocked per tap, or per tap row (kw * c contiguous floats) when groups is 1
 * and dilation_w 1; a pixel whose tap row is cut by the left/right padding has that block
 * copied, with its zeros, into the thread's scratch. With cog <= 16 (one narrow panel per
 * group) and an ISA that has the narrow kernel's tap batches (AVX-512), up to 16 taps run in
 * one micro-kernel call, the tile's sums held in registers across them.
 *
 * Work items of (group, block of at most 96 pixels, the blocks of equal size, block of up to 8
 * panels of 32 output channels)
 * go to the worker pool; an item walks K in order and its last K block's micro-kernels apply
 * `epilogue` (NULL: none) to each tile before storing it (gemm_tail in gemm_internal.h: bit
 * for bit mg_channel_epilogue).
 *
 * Summation order: every output element is one chain of fused multiply-adds from +0 over
 * the taps (i, j) row-major, then the group's channels in order (padding taps add
 * 0 * f), continued across K blocks through the float32 stored in y (exact): bit-identical
 * for any thread count, blocking and ISA. Error bound (recursive summation, K = kh * kw * cg
 * terms): |y - exact| <= K * 2^-24 * sum |x * f| (1 + O(K 2^-24)).
 *
 * Return value (mg_runtime.h): MG_OK, MG_EINVAL for bad sizes (negative, groups not
 * dividing c and co, strides or dilations < 1) or NULL buffers, MG_ENOMEM when the scratch
 * could not be allocated.
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_CONV_GEMM_H
#define MINIGRAPH_CONV_GEMM_H

#include <stdint.h>

#include "activations.h"
#include "mg_runtime.h"

/* BEGIN CDEF */
/* x [n,h,w,c] NHWC, packed_f as above, y [n,out_h,out_w,co] NHWC. */
int mg_conv_gemm_forward(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                         int64_t co, int64_t groups, int64_t stride_h, int64_t stride_w,
                         int64_t dilation_h, int64_t dilation_w, int64_t pad_top,
                         int64_t pad_left, int64_t out_h, int64_t out_w, const float *x,
                         const float *packed_f, float *y, const mg_epilogue *epilogue,
                         int num_threads);
/* END CDEF */

#endif

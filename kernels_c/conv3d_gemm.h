/* minigraph native float32 3-D convolution (Conv3D) and its gradients (Conv3DBackpropInputV2,
 * Conv3DBackpropFilterV2) on the GEMM micro-kernels (gemm_internal.h), any strides,
 * dilations and non-negative pads (SAME / VALID as the caller computed them).
 *
 * Tensors are C-contiguous float32 NDHWC (the caller transposes NCDHW): x and dx
 * [n][in0][in1][in2][c], y and dy [n][out0][out1][out2][co], the filter and its gradient
 * DHWIO [k0][k1][k2][c][co]. Output voxel u reads input voxel u * stride - pad + a * dilation
 * (per spatial dim) through tap a = (a0, a1, a2), zero outside x:
 *
 *   y[n, u, o]  = sum over taps a (row-major), then c, of x[n, u*s - p + a*d, c] * f[a, c, o];
 *   dx[n, v, c] = sum over the taps a with (v + p - a*d) / s = u a whole dy voxel, then o,
 *                 of dy[n, u, o] * f[a, c, o];
 *   df[a, c, o] = sum over the voxels (n, u) of x[n, u*s - p + a*d, c] * dy[n, u, o].
 *
 * All three are implicit GEMMs whose A rows are read where they lie (per-row pointers into
 * x or dy, a zero row for a tap in the padding, a gathered copy where a K block crosses the
 * edge): the forward M = output voxels, K = taps x c, N = co (the filter packed by
 * mg_gemm_pack_b as [taps * c][co]); the input gradient per stride phase (the dx voxels
 * v = phase + u * s share their taps), M = the phase's voxels, K = its taps x co, N = c;
 * the filter gradient M = taps x c (df's rows), K = voxels, N = co (A an im2col block of x,
 * B dy's block).
 *
 * Summation order (fixed by the shapes; bit-identical for any thread count and ISA): every
 * element is one chain of fused multiply-adds from +0,
 *   - forward: over the taps a0, a1, a2 ascending (row-major), then c ascending;
 *   - input gradient: over the phase's taps, a0 ascending, a1 ascending, a2 descending, then
 *     o ascending (a tap whose dy voxel lies outside dy adds 0 * f);
 *   - filter gradient: the voxels (n, u) in row-major order are cut into
 *     mg_conv3d_gemm_filter_chunks ranges (a function of the shapes only); each range is one
 *     chain in voxel order (out-of-x taps add 0 * dy), the ranges' sums added in range order.
 * Error bound (recursive summation, K terms): |result - exact| <= K * 2^-24 * sum |a * b|
 * (1 + O(K 2^-24)).
 *
 * Return value (mg_runtime.h): MG_OK, MG_EINVAL (negative sizes, a stride or dilation below
 * 1, a NULL buffer), MG_ENOMEM (scratch).
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_CONV3D_GEMM_H
#define MINIGRAPH_CONV3D_GEMM_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
/* The geometry of a 3-D convolution (spatial dims in NDHWC order: planes, height, width). */
typedef struct {
    int64_t n, c, co;
    int64_t in[3], k[3], out[3];
    int64_t stride[3], dilation[3], pad[3]; /* pad: before each spatial dim */
} mg_conv3d_shape;

/* y = conv(x, f) with f packed by mg_gemm_pack_b as [k0 * k1 * k2 * c][co]. */
int mg_conv3d_gemm_forward(const mg_conv3d_shape *s, const float *x, const float *packed_f,
                           float *y, int num_threads);
/* dx = d conv / d x given f (DHWIO) and dy. */
int mg_conv3d_gemm_backprop_input(const mg_conv3d_shape *s, const float *f, const float *dy,
                                  float *dx, int num_threads);
/* df (DHWIO) = d conv / d f given x and dy. */
int mg_conv3d_gemm_backprop_filter(const mg_conv3d_shape *s, const float *x, const float *dy,
                                   float *df, int num_threads);
/* The voxel ranges the filter gradient sums apart (see the summation order). */
int64_t mg_conv3d_gemm_filter_chunks(const mg_conv3d_shape *s);
/* END CDEF */

#endif

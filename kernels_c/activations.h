/* minigraph native activation kernels (float32, elementwise): public C API.
 *
 *   Relu:       y = x > 0 ? x : +0, and NaN stays NaN (as numpy.maximum(x, 0))
 *   Relu6:      y = min(max(x, 0), 6): x > 0 ? min(x, 6) : +0, and NaN stays NaN
 *   LeakyRelu:  y = x > 0 ? x : x * alpha (TensorFlow's select: NaN stays NaN)
 *   Softsign:   y = x / (1 + |x|) (+-inf gives NaN, as TensorFlow's)
 *   ReluGrad:   dx = g where features > 0, else a zero
 *   Relu6Grad:  dx = g where 0 < features < 6, else a zero
 * (the exact expressions, signs of zeros included: activations_internal.h): bit for bit the
 * numpy kernels. The exponential ones (mg_mathf.h), each within the stated bound of the
 * exact value (ulps of the float32 result, measured over float32 inputs sampled across the
 * whole line, tests/test_activation_ops.py):
 *   Sigmoid:    1 / (1 + e^-x)                                     <= 3 ulp
 *   Tanh:       tanh x                                             <= 3 ulp
 *   Elu:        x < 0 ? e^x - 1 : x                                <= 1 ulp
 *   Selu:       x < 0 ? scale * alpha * (e^x - 1) : scale * x       <= 2 ulp
 *               (TensorFlow's float constants, activations_internal.h)
 *   Softplus:   log(1 + e^x)                                       <= 3 ulp
 * with TensorFlow's values at +-inf (0/1, -1/1, -1, -scale * alpha, 0/inf) and NaN staying
 * NaN; results that are subnormal stay subnormal (TensorFlow flushes them to zero).
 * The error function (Erf, Erfc: exact GELU's), through the C library in double precision:
 *   Erf:        erf(x)  = 2/sqrt(pi) * integral_0^x e^(-t^2) dt      correctly rounded
 *   Erfc:       erfc(x) = 1 - erf(x), without the cancellation      correctly rounded
 * each element widened to double, glibc's erf/erfc (within an ulp of double) and rounded
 * once to float32: CPython's math.erf/erfc are the same functions, so the results are their
 * values rounded (TensorFlow's float32 polynomials are up to 6 ulps (Erf) and 65 ulps (Erfc)
 * off, and flush Erfc's subnormal results to zero).
 * Each is one line of activations_internal.h (its scalar formula); activations_template.h
 * makes the per-ISA loops of it and activations.c the entry point (threads, checks). Every
 * ISA computes the same bits (no FMA contraction), whatever the thread count.
 *
 * Return value (mg_runtime.h): MG_OK, or MG_EINVAL (count < 0, or a NULL buffer with
 * count > 0). `num_threads` <= 1: the calling thread.
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_ACTIVATIONS_H
#define MINIGRAPH_ACTIVATIONS_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
int mg_relu(int64_t count, const float *x, float *y, int num_threads);
int mg_relu6(int64_t count, const float *x, float *y, int num_threads);
int mg_sigmoid(int64_t count, const float *x, float *y, int num_threads);
int mg_tanh(int64_t count, const float *x, float *y, int num_threads);
int mg_elu(int64_t count, const float *x, float *y, int num_threads);
int mg_selu(int64_t count, const float *x, float *y, int num_threads);
int mg_softplus(int64_t count, const float *x, float *y, int num_threads);
int mg_softsign(int64_t count, const float *x, float *y, int num_threads);
int mg_leaky_relu(int64_t count, const float *x, float *y, float alpha, int num_threads);
int mg_erf(int64_t count, const float *x, float *y, int num_threads);
int mg_erfc(int64_t count, const float *x, float *y, int num_threads);

int mg_relu_grad(int64_t count, const float *g, const float *features, float *dx,
                 int num_threads);
int mg_relu6_grad(int64_t count, const float *g, const float *features, float *dx,
                  int num_threads);

/* A convolution's (or matmul's) elementwise successors, fused: what they do to y [rows]
 * [channels], stage by stage in this order:
 *   y += bias[c]                               (BiasAdd; skipped when bias is NULL)
 *   y = (y - mean[c]) * k[c] + offset[c]       (batch-norm inference, k = scale * rsqrt(var +
 *                                               eps); skipped when mean is NULL)
 *   y += residual                              (an elementwise add; skipped when NULL)
 *   y = relu(y) / relu6(y)                     (activation 1 / 2; 0: none)
 * each stage rounded exactly as the separate kernel rounds it (the affine stage: one fused
 * multiply-add where the ISA has FMA, as the batch-norm kernels), so the result is bit for
 * bit what the ops compute one after the other. The vectors hold one float per channel; the
 * residual is laid out as y. mg_conv2d_forward applies one to its tiles in registers. */
typedef struct {
    const float *bias, *mean, *k, *offset;
    const float *residual;
    int activation;
} mg_epilogue;

/* The epilogue in place on y [rows][channels], in cache-sized blocks of rows, each block
 * through every stage before the next. MG_EINVAL also when mean, k and offset are not all
 * given or all NULL, or activation is not 0, 1 or 2. */
int mg_channel_epilogue(int64_t rows, int64_t channels, float *y, const mg_epilogue *e,
                        int num_threads);

/* Sum of x [outer][rows][channels] over its middle axis into y [outer][channels], each sum
 * accumulated in float32 row after row from +0 (numpy's order for a reduction over
 * non-innermost axes; |error| <= (rows - 1) * 2^-24 * sum |x|); divisor > 0 (a mean: the
 * count of elements reduced, in this call and earlier stages) divides each sum in double
 * and rounds once to float32 (numpy's true_divide by its int64 count). What Sum and Mean
 * over the spatial axes of NHWC images (global average pooling) compute. */
int mg_reduce_rows(int64_t outer, int64_t rows, int64_t channels, const float *x, float *y,
                   int64_t divisor, int num_threads);

/* Sum of each row of x [outer][n] (n >= 1) into y [outer], in numpy's order for a
 * contiguous innermost axis: y = +0 + pairwise(x[0..n)), where pairwise sums fewer than 8
 * elements one after another from +0, up to 128 elements in 8 running partial sums (element
 * i into sum i mod 8) combined as ((s0+s1)+(s2+s3))+((s4+s5)+(s6+s7)) plus the tail one
 * after another, and longer runs as pairwise(first n2) + pairwise(rest), n2 = n/2 rounded
 * down to a multiple of 8 (|error| <= (7 + log2(n)) * 2^-24 * sum |x|, roughly). divisor
 * as mg_reduce_rows'. */
int mg_reduce_inner(int64_t outer, int64_t n, const float *x, float *y, int64_t divisor,
                    int num_threads);

/* Sum of strided rows: y[o][c] = +0 + sum over r in order of x[outer_off[o] + row_off[r] + c]
 * (c < channels), divisor as mg_reduce_rows'. The caller lists the offsets (elements) and
 * guarantees every x it names lies in x's buffer: numpy's order for a reduction over axes
 * separated by kept ones (the reduced indices in row-major order, one running sum), with
 * mg_reduce_rows' bound. */
int mg_reduce_gather(int64_t outer, int64_t rows, int64_t channels, const int64_t *outer_off,
                     const int64_t *row_off, const float *x, float *y, int64_t divisor,
                     int num_threads);

/* Softmax cross entropy of the rows of x [rows][classes] (TF's xent): with m the row's
 * maximum (NaN if any is NaN), e_i = exp(x_i - m) (mgf_exp) and s = sum e_i added in class
 * order, lse = log(s) (mgf_log_ge1); dense labels [rows][classes]: loss = sum_i labels_i *
 * (lse - (x_i - m)) in class order, backprop_i = e_i / s - labels_i; sparse labels [rows]
 * (each in [0, classes), else MG_EINVAL): loss = lse - (x_label - m), backprop_i = e_i / s -
 * (i == label). Exactly one of labels and sparse is given. Rows are independent: the same
 * bits for any thread count; within a few ulp of the exact values per element, the losses
 * within classes * 2^-23 * sum_i |labels_i (lse - x_i + m)| (a sum in class order). */
int mg_softmax_xent(int64_t rows, int64_t classes, const float *x, const float *labels,
                    const int64_t *sparse, float *loss, float *backprop, int num_threads);
/* END CDEF */

/* MG_OK when `e` is a valid epilogue (mean, k and offset all given or all NULL; activation 0,
 * 1 or 2), else MG_EINVAL: the check of mg_channel_epilogue, for other kernels that take
 * one. */
int mg_epilogue_check(const mg_epilogue *e);

/* The epilogue (checked already) on one tile of y [..][ld]: `rows` rows of `cols` values from
 * y + start (row stride ld; channel of the tile's first column: start % ld; residual at the
 * same offsets), each element through the stages in order: bit for bit what
 * mg_channel_epilogue gives those elements. For the GEMM drivers, on each finished tile
 * while it is in cache. */
void mg_epilogue_tile(const mg_epilogue *e, float *y, int64_t ld, int64_t start, int64_t rows,
                      int64_t cols);

#endif

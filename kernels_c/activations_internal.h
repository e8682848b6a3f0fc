/* Internals of the activation kernels: THE LIST of activations, one line each, from which
 * activations_template.h makes every ISA's loops and activations.c the mg_<name> entry
 * points (declared in activations.h's CDEF region, one line there too).
 *
 *   unary:  X(name, expression of float x)               -> int mg_<name>(count, x, y, nt)
 *   scaled: X(name, expression of float x and float a)   -> int mg_<name>(count, x, y, a, nt)
 *           (a: the op's float attr, LeakyRelu's alpha)
 *   binary: X(name, expression of float g and float x)   -> int mg_<name>(count, g, features,
 *           (gradients: g the incoming gradient,                           dx, nt)
 *            x the forward input, "features")
 * The compiler vectorizes each expression for the ISA the template is compiled for (compare
 * and select: keep it branch-free, no calls but builtins and the inline exponentials of
 * mg_mathf.h). Gradients are TensorFlow's
 * g * mask, written as a select between g (g * 1 is g) and g * 0 so that GCC vectorizes it
 * on every ISA: an infinite or NaN gradient where the mask is 0 gives NaN, a negative one -0.
 * The loops are compiled without FMA contraction, so every ISA computes the same bits:
 * relu, relu6, leaky_relu and softsign (single roundings) are bit for bit the numpy kernels;
 * the exponential ones are within the ulp bounds activations.h states.
 */
#ifndef MINIGRAPH_ACTIVATIONS_INTERNAL_H
#define MINIGRAPH_ACTIVATIONS_INTERNAL_H

#include <stdint.h>

#include "mg_runtime.h"

#define MG_UNARY_ACTIVATIONS(X)                                                             \
    X(relu, (x > 0.0f || x != x) ? x : 0.0f)                                                \
    X(relu6, x > 0.0f ? (x < 6.0f ? x : 6.0f) : (x != x ? x : 0.0f))                      \
    X(sigmoid, mgf_sigmoid(x))                                                              \
    X(tanh, mgf_tanh(x))                                                                    \
    X(elu, x < 0.0f ? mgf_expm1_neg(x) : x)                                                 \
    X(selu, x < 0.0f ? MG_SELU_SCALE_ALPHA * mgf_expm1_neg(x) : MG_SELU_SCALE * x)          \
    X(softplus, mgf_softplus(x))                                                            \
    X(softsign, x / (1.0f + __builtin_fabsf(x)))

#define MG_SCALED_ACTIVATIONS(X) X(leaky_relu, x > 0.0f ? x : x * a)

/* SELU's constants (Klambauer et al., 2017) as TensorFlow rounds them to float:
 * scale = 1.0507009873554804934..., scale * alpha = 1.7580993408473768599... */
#define MG_SELU_SCALE 1.05070102214813232421875f
#define MG_SELU_SCALE_ALPHA 1.7580993175506591796875f

#define MG_BINARY_ACTIVATIONS(X)                                                            \
    X(relu_grad, x > 0.0f ? g : g * 0.0f)                                                   \
    X(relu6_grad, (x > 0.0f && x < 6.0f) ? g : g * 0.0f)

#define ACT_ID(name, expr) ACT_##name,
enum { MG_UNARY_ACTIVATIONS(ACT_ID) MG_SCALED_ACTIVATIONS(ACT_ID) ACT_NUNARY };
enum { MG_BINARY_ACTIVATIONS(ACT_ID) ACT_NBINARY };
#undef ACT_ID

/* y[i] = f(x[i]) (a: a scaled activation's parameter, unused by the others) / dx[i] =
 * f(g[i], x[i]) for i < n */
typedef void (*act_unary_fn)(const float *x, float *y, int64_t n, float a);
typedef void (*act_binary_fn)(const float *g, const float *x, float *dx, int64_t n);

/* The stages of a per-channel epilogue (mg_channel_epilogue), in place on rows of
 * `channels` values: y[r][c] += v[c]; y[r][c] = (y[r][c] - mean[c]) * k[c] + offset[c]
 * (fused multiply-add where the ISA has one, as the batch-norm kernels compute it);
 * y[i] += z[i]. */
typedef void (*act_channel_add_fn)(float *y, const float *v, int64_t rows, int64_t channels);
typedef void (*act_channel_affine_fn)(float *y, const float *mean, const float *k,
                                      const float *offset, int64_t rows, int64_t channels);
typedef void (*act_add_fn)(float *y, const float *z, int64_t n);
/* acc[c] += x[r][c] for r = 0, 1, ... rows - 1 in that order (rows of `stride` floats) */
typedef void (*act_rows_sum_fn)(float *acc, const float *x, int64_t rows, int64_t channels,
                                int64_t stride);

/* One table per ISA (activations_template.h) */
typedef float (*act_inner_sum_fn)(const float *x, int64_t n);
/* acc[c] += x[off[r] + c] for rows r in order, channels c < n */
typedef void (*act_rows_sum_at_fn)(float *acc, const float *x, const int64_t *off,
                                   int64_t rows, int64_t n);
typedef void (*act_xent_rows_fn)(const float *x, int64_t classes, const float *labels,
                                 const int64_t *sparse, float *loss, float *bp, int64_t lo,
                                 int64_t hi);

typedef struct {
    act_unary_fn unary[ACT_NUNARY];
    act_binary_fn binary[ACT_NBINARY];
    act_channel_add_fn channel_add;
    act_channel_affine_fn channel_affine;
    act_add_fn add;
    act_rows_sum_fn rows_sum;
    act_inner_sum_fn inner_sum;
    act_rows_sum_at_fn rows_sum_at;
    act_xent_rows_fn xent_rows;
} act_kernel_table;

extern const act_kernel_table act_kernels_scalar;
#if MG_X86
extern const act_kernel_table act_kernels_avx2, act_kernels_avx512;
#endif

#endif

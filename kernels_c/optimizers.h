/* minigraph native training-step kernels (float32): optimizer updates and gradient
 * accumulation. Public C API.
 *
 * TF's formulas (tensorflow/core/kernels/training_ops.cc), one float32 rounding per
 * operation in the order written (no FMA contraction: the numpy kernels' results, and TF's
 * CPU kernels' bit for bit wherever no result is subnormal: TF's threads flush subnormals to
 * zero, these kernels and numpy keep them):
 *
 * ApplyGradientDescent: var' = var - alpha * delta.
 * ApplyMomentum: accum' = accum * momentum + grad; var' = var - lr * accum', or with
 *   Nesterov var' = var - (grad * lr + accum' * momentum * lr).
 * ApplyAdam (one variable): m' = m + (g - m) * (1 - beta1), v' = v + (g^2 - v) * (1 - beta2),
 *   var' = var - lr_t * s / (sqrt(v') + epsilon), s = m' (or beta1 * m' + (1 - beta1) * g
 *   with Nesterov); lr_t is computed by the caller.
 * AddN: y = ((x[0] + x[1]) + x[2]) + ... , the inputs added in their order, per element.
 *
 * Every element is independent, so the results do not depend on `num_threads` (chunks of
 * whole cache lines go to the worker pool; <= 1: the calling thread). The outputs are new
 * buffers, or the inputs themselves (an output may alias the input it replaces: each
 * element is read before it is written).
 *
 * Return value (mg_runtime.h): MG_OK, or MG_EINVAL (count < 0, n < 1, or a NULL buffer with
 * count > 0), MG_ENOMEM (mg_apply_update_list only).
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_OPTIMIZERS_H
#define MINIGRAPH_OPTIMIZERS_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
int mg_apply_gradient_descent(int64_t count, const float *var, const float *delta,
                              float alpha, float *var_out, int num_threads);

int mg_apply_momentum(int64_t count, const float *var, const float *accum, const float *grad,
                      float lr, float momentum, int use_nesterov, float *var_out,
                      float *accum_out, int num_threads);

int mg_apply_adam(int64_t count, const float *var, const float *m, const float *v,
                  const float *grad, float lr_t, float beta1, float beta2, float epsilon,
                  int use_nesterov, float *var_out, float *m_out, float *v_out,
                  int num_threads);

int mg_add_n(int64_t count, int n, const float *const *x, float *y, int num_threads);

/* Every variable update of a step in one call (the remapper's _FusedApplyGradientDescent /
 * _FusedApplyMomentum / _FusedApplyAdam): `kind` MG_UPDATE_*, n variables, variable k of
 * counts[k] elements updated by the single-variable formula above with its own scalars
 * lr[k] (alpha; Adam's lr_t), c1[k] (momentum; beta1), c2[k] (beta2), epsilon[k], reading
 * var[k], a[k] (accum; m), b[k] (v), grad[k] (delta) and writing var_out[k], a_out[k],
 * b_out[k] (arrays a kind does not read may be NULL). The elements of all variables, laid
 * end to end, are split into chunks for the worker pool: the bits of each variable's own
 * call, for any thread count. MG_ENOMEM when the argument arrays cannot be allocated. */
#define MG_UPDATE_GRADIENT_DESCENT 0
#define MG_UPDATE_MOMENTUM 1
#define MG_UPDATE_ADAM 2
int mg_apply_update_list(int kind, int n, const int64_t *counts, const float *const *var,
                         const float *const *a, const float *const *b,
                         const float *const *grad, float *const *var_out, float *const *a_out,
                         float *const *b_out, const float *lr, const float *c1,
                         const float *c2, const float *epsilon, int use_nesterov,
                         int num_threads);
/* END CDEF */

#endif

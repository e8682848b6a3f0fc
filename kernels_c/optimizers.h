/* minigraph native optimizer kernels (float32): public C API.
 *
 * ApplyAdam (one variable): m' = m + (g - m) * (1 - beta1), v' = v + (g^2 - v) * (1 - beta2),
 * var' = var - lr_t * s / (sqrt(v') + epsilon), s = m' (or beta1 * m' + (1 - beta1) * g with
 * Nesterov); lr_t is computed by the caller. Every operation rounds to float32 as numpy's
 * do (no FMA contraction): the same results as the numpy kernel. Writes new arrays (the
 * inputs are not changed).
 *
 * Return value (mg_runtime.h): MG_OK, or MG_EINVAL (count < 0, or a NULL buffer with
 * count > 0).
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_OPTIMIZERS_H
#define MINIGRAPH_OPTIMIZERS_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
int mg_apply_adam(int64_t count, const float *var, const float *m, const float *v,
                  const float *grad, float lr_t, float beta1, float beta2, float epsilon,
                  int use_nesterov, float *var_out, float *m_out, float *v_out);
/* END CDEF */

#endif

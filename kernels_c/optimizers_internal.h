/* Internals of the optimizer kernels: the driver (optimizers.c) and the per-ISA loops
 * (optimizers_isa_*.c, instantiating optimizers_template.h) meet here: the table of one ISA.
 */
#ifndef MINIGRAPH_OPTIMIZERS_INTERNAL_H
#define MINIGRAPH_OPTIMIZERS_INTERNAL_H

#include <stdint.h>

#include "mg_runtime.h"

typedef void (*opt_adam_fn)(const float *var, const float *m, const float *v,
                            const float *grad, float *var_out, float *m_out, float *v_out,
                            float lr_t, float beta1, float beta2, float epsilon, int nesterov,
                            int64_t n);

/* One table per ISA (optimizers_template.h) */
typedef struct {
    opt_adam_fn adam;
} opt_kernel_table;

extern const opt_kernel_table opt_kernels_scalar;
#if MG_X86
extern const opt_kernel_table opt_kernels_avx2, opt_kernels_avx512;
#endif

#endif

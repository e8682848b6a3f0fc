/* Internals of the training-step kernels: the driver (optimizers.c) and the per-ISA loops
 * (optimizers_isa_*.c, instantiating optimizers_template.h) meet here: the table of one ISA.
 */
#ifndef MINIGRAPH_OPTIMIZERS_INTERNAL_H
#define MINIGRAPH_OPTIMIZERS_INTERNAL_H

#include <stdint.h>

#include "mg_runtime.h"

/* The arguments of one update, shared by every chunk of it (optimizers.c fills in what the
 * update reads; the loops take [lo, hi) of each buffer) */
typedef struct {
    const float *var, *a, *b, *grad;      /* a, b: accum / m, v; grad: delta for SGD */
    float *var_out, *a_out, *b_out;
    float lr, c1, c2, epsilon;            /* c1, c2: momentum / beta1, beta2 */
    int nesterov;
} opt_args;

typedef void (*opt_update_fn)(const opt_args *args, int64_t lo, int64_t hi);
typedef void (*opt_add_n_fn)(int n, const float *const *x, float *y, int64_t lo, int64_t hi);

/* One table per ISA (optimizers_template.h) */
typedef struct {
    opt_update_fn gradient_descent, momentum, adam;
    opt_add_n_fn add_n;
} opt_kernel_table;

extern const opt_kernel_table opt_kernels_scalar;
#if MG_X86
extern const opt_kernel_table opt_kernels_avx2, opt_kernels_avx512;
#endif

#endif

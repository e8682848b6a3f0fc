/* Internals of the broadcasting binary ops: THE LIST, one line each,
 *
 *   X(name, expression of float a (x's element) and float b (y's element))
 *
 * from which broadcast_template.h makes every ISA's three loops per op (both operands
 * vectors; y one value; x one value) and broadcast.c the op's index and name. Keep the
 * expression branch-free (compare and select; the compiler vectorizes it); it is compiled
 * without FMA contraction. The index of an op is its place in the list, so an op added
 * anywhere is found by name from Python (mg_broadcast_op_name), never by number.
 */
#ifndef MINIGRAPH_BROADCAST_INTERNAL_H
#define MINIGRAPH_BROADCAST_INTERNAL_H

#include <stdint.h>

#include "broadcast.h"
#include "mg_runtime.h"

#define MG_BROADCAST_OPS(X)                                                                 \
    X(add, a + b)                                                                           \
    X(sub, a - b)                                                                           \
    X(mul, a * b)                                                                           \
    X(div, a / b)                                                                           \
    X(maximum, ((a < b) | (b != b)) ? b : a)                                                \
    X(minimum, ((b < a) | (b != b)) ? b : a)                                                \
    X(squared_difference, (a - b) * (a - b))

#define BC_ID(name, expr) BC_##name,
enum { MG_BROADCAST_OPS(BC_ID) BC_NOPS };
#undef BC_ID

/* z[i] = x[i] OP y[i] (vv), x[i] OP y[0] (vs), x[0] OP y[i] (sv) for i < n */
typedef void (*bc_fn)(const float *x, const float *y, float *z, int64_t n);

/* One table per ISA (broadcast_template.h) */
typedef struct {
    bc_fn vv[BC_NOPS], vs[BC_NOPS], sv[BC_NOPS];
} bc_kernel_table;

extern const bc_kernel_table bc_kernels_scalar;
#if MG_X86
extern const bc_kernel_table bc_kernels_avx2, bc_kernels_avx512;
#endif

#endif

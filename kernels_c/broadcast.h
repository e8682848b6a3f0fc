/* minigraph native binary elementwise ops with numpy broadcasting (float32): public C API.
 *
 *   z = x OP y over the broadcast shape of x and y, OP one of THE LIST in
 *   broadcast_internal.h (MG_BROADCAST_OPS: add, sub, mul, div; another binary op is one
 *   line there), by its index in that list: mg_broadcast_op_count() ops, named by
 *   mg_broadcast_op_name(op) (Python looks its ops up by name).
 *
 * Each element is one IEEE single operation rounded once (no FMA contraction), so z is bit
 * for bit numpy's float32 result, whatever the ISA, the thread count or the broadcast.
 *
 * Shapes: `rank` dimensions (1 <= rank <= MG_BROADCAST_MAX_RANK), `dims` the shape of z;
 * x_dims[d] and y_dims[d] are dims[d] or 1 (broadcast along d), at least one of them dims[d]
 * (numpy's rule: a 0 meets a 0 or a 1). x, y and z are C-contiguous (x holds prod(x_dims) floats, y prod(y_dims), z
 * prod(dims)). Callers merge neighbouring dimensions that broadcast alike first (Python:
 * minigraph/backends/math_kernels.py), so [N,H,W,C] * [1,1,1,C] arrives as [NHW, C] * [1, C]
 * and a same-shape or scalar operation as rank 1. The innermost dimension runs as one
 * vector loop (vector-vector, vector-scalar or scalar-vector); z's elements are split among
 * the worker pool's threads in whole cache lines.
 *
 * Return value (mg_runtime.h): MG_OK, or MG_EINVAL (an unknown op, a rank out of range,
 * dims that are not a broadcast, a size over 2^63, or a NULL buffer with a non-empty z).
 * `num_threads` <= 1: the calling thread.
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_BROADCAST_H
#define MINIGRAPH_BROADCAST_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
#define MG_BROADCAST_MAX_RANK 8

int mg_broadcast_op_count(void);
/* The op's name in the list ("add", ...), NULL out of range. */
const char *mg_broadcast_op_name(int op);

int mg_broadcast(int op, int rank, const int64_t *dims, const int64_t *x_dims,
                 const int64_t *y_dims, const float *x, const float *y, float *z,
                 int num_threads);
/* END CDEF */

#endif

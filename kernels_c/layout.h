/* minigraph native layout kernels (float32 copies): public C API.
 *
 *   Pad: y = x with zeros around it; x [d_0][d_1]...[d_{r-1}], y [d_i + before_i + after_i].
 *   Concat: y [outer][w_0 + ... + w_{n-1}] = the n inputs side by side, input i
 *     [outer][w_i] (a concatenation along an axis: `outer` is the product of the dimensions
 *     before it, w_i the input's axis dimension times those after it).
 *   Transpose: y = x with its axes permuted, y's axis i being x's axis perm[i]; x
 *     [d_0]...[d_{r-1}] (callers merge the axes that stay neighbours first). y's rows (all
 *     its axes but the last) go to the worker pool; each gathers its elements at x's stride
 *     along that axis (a copy: the same bits for any thread count).
 *
 *   Fill: y[i] = value (OnesLike, ZerosLike, Fill in float32).
 *   Int32ToFloat: y[i] = (float)x[i], rounded to nearest even (Cast int32 -> float32, as
 *     numpy's astype and TF's static_cast).
 *
 * Return value (mg_runtime.h): MG_OK, MG_ENOMEM, or MG_EINVAL (rank outside [0, 8], a
 * negative size or padding, a NULL buffer where elements are read or written).
 * `num_threads` <= 1: the calling thread.
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_LAYOUT_H
#define MINIGRAPH_LAYOUT_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
int mg_pad(int rank, const int64_t *dims, const int64_t *before, const int64_t *after,
           const float *x, float *y, int num_threads);
int mg_concat(int64_t outer, int count, const int64_t *widths, const float *const *inputs,
              float *y, int num_threads);
int mg_transpose(int rank, const int64_t *dims, const int *perm, const float *x, float *y,
                 int num_threads);
int mg_fill(int64_t count, float value, float *y, int num_threads);
int mg_int32_to_float(int64_t count, const int32_t *x, float *y, int num_threads);
/* END CDEF */

#endif

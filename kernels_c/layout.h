/* minigraph native layout kernels (float32 copies): public C API.
 *
 *   Pad: y = x with zeros around it; x [d_0][d_1]...[d_{r-1}], y [d_i + before_i + after_i].
 *
 * Return value (mg_runtime.h): MG_OK, or MG_EINVAL (rank outside [0, 8], a negative size or
 * padding, a NULL buffer where elements are read or written). `num_threads` <= 1: the
 * calling thread.
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
/* END CDEF */

#endif

/* minigraph native image resize kernels (float32, NHWC): public C API.
 *
 *   mg_resize_nearest:  y[b, i, j, :] = x[b, rows[i], cols[j], :]
 *   mg_resize_bilinear: with tl, tr, bl, br the pixels (y_lower[i] or y_upper[i],
 *                       x_lower[j] or x_upper[j]) of image b,
 *                         top    = tl + (tr - tl) * x_lerp[j]
 *                         bottom = bl + (br - bl) * x_lerp[j]
 *                         y[b, i, j, :] = top + (bottom - top) * y_lerp[i]
 *                       in float32 without FMA contraction (TF's compute_lerp, bit for bit).
 *
 * x is [n, h, w, c], y [n, oh, ow, c]; the per-row (oh entries) and per-column (ow entries)
 * tables say where each output pixel reads: the caller computes them (TF's coordinate
 * rules live in Python, minigraph/backends/image_kernels.py) and C checks every index lies
 * in the image. Output rows run on the worker pool.
 *
 * Return value (mg_runtime.h): MG_OK, or MG_EINVAL (a negative size, an index outside the
 * image, a NULL buffer where elements are read or written). `num_threads` <= 1: the
 * calling thread.
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_IMAGE_H
#define MINIGRAPH_IMAGE_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
int mg_resize_nearest(int64_t n, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                      const int64_t *rows, const int64_t *cols, const float *x, float *y,
                      int num_threads);
int mg_resize_bilinear(int64_t n, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                       const int64_t *y_lower, const int64_t *y_upper, const int64_t *x_lower,
                       const int64_t *x_upper, const float *y_lerp, const float *x_lerp,
                       const float *x, float *y, int num_threads);
/* END CDEF */

#endif

/* Internals of the image kernels: the driver (image.c) and the per-ISA loops
 * (image_isa_*.c, instantiating image_template.h) meet here: the geometry of a call and the
 * table of one ISA.
 */
#ifndef MINIGRAPH_IMAGE_INTERNAL_H
#define MINIGRAPH_IMAGE_INTERNAL_H

#include <stdint.h>

#include "mg_runtime.h"

typedef struct {
    int64_t h, w, c, oh, ow;
    const int64_t *y_lower, *y_upper, *x_lower, *x_upper; /* nearest: rows in y_lower,
                                                             columns in x_lower */
    const float *y_lerp, *x_lerp;
    const float *x;
    float *y;
} resize_geo;

/* Output rows [lo, hi) of a call (row = image * oh + output y). */
typedef void (*resize_rows_fn)(const resize_geo *g, int64_t lo, int64_t hi);

/* One table per ISA (image_template.h) */
typedef struct {
    resize_rows_fn bilinear;
} image_kernel_table;

extern const image_kernel_table image_kernels_scalar;
#if MG_X86
extern const image_kernel_table image_kernels_avx2, image_kernels_avx512;
#endif

#endif

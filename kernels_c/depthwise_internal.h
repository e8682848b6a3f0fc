/* Internals of the depthwise kernels: the driver (depthwise.c) and the per-ISA loops
 * (depthwise_isa_*.c, instantiating depthwise_template.h) meet here: the geometry of a
 * call, the tap-range helper and the table of one ISA.
 *
 * The loops see one multiplier: `c` channels, the filter [kh][kw][c] and out_backprop
 * [n][out_h][out_w][c]. With mult > 1 the driver first repeats each input channel mult
 * times (x becomes [n][h][w][c * mult], whose channel c * mult + m lines up with the
 * output's) for the forward and the filter gradient; the input gradient keeps the input's
 * channels and walks dy and f with the multiplier (see dw_bwi_rows).
 */
#ifndef MINIGRAPH_DEPTHWISE_INTERNAL_H
#define MINIGRAPH_DEPTHWISE_INTERNAL_H

#include <stdint.h>

#include "mg_runtime.h"

typedef struct {
    int64_t n, h, w, c;   /* input (NHWC); c: the channels the loops run over */
    int64_t kh, kw;       /* filter taps */
    int64_t sh, sw, dh, dw;
    int64_t pt, pl;       /* top / left padding */
    int64_t oh, ow;       /* output */
    int64_t mult;         /* the input gradient's multiplier (1 for the other two) */
} dw_geo;

/* The t in [*lo, *hi) (within [0, count)) with 0 <= start + t * step < size (step >= 1):
 * the taps of a window that fall inside the input, the output pixels a tap reaches. */
static inline void dw_span(int64_t start, int64_t step, int64_t count, int64_t size,
                           int64_t *lo, int64_t *hi)
{
    *lo = start >= 0 ? 0 : (-start + step - 1) / step;
    *hi = size - 1 - start < 0 ? 0 : (size - 1 - start) / step + 1;
    if (*hi > count)
        *hi = count;
    if (*hi < *lo)
        *hi = *lo;
}

/* Output rows [lo, hi) (row = image * out_h + p) of the forward. */
typedef void (*dw_fwd_fn)(const dw_geo *g, const float *x, const float *f, float *y,
                          int64_t lo, int64_t hi);
/* Input-gradient rows [lo, hi) (row = image * h + r). */
typedef void (*dw_bwi_fn)(const dw_geo *g, const float *dy, const float *f, float *dx,
                          int64_t lo, int64_t hi);
/* One image's filter-gradient sums, for the channels [c0, c0 + lanes) (lanes <= the
 * ISA's vector width), into part [kh][kw][c]. */
typedef void (*dw_bwf_fn)(const dw_geo *g, const float *x, const float *dy, float *part,
                          int64_t img, int64_t c0);

/* One table per ISA (depthwise_template.h) */
typedef struct {
    int lanes; /* floats per vector: the filter gradient's channel block */
    dw_fwd_fn forward;
    dw_bwi_fn backprop_input;
    dw_bwf_fn backprop_filter;
} dw_kernel_table;

extern const dw_kernel_table dw_kernels_scalar;
#if MG_X86
extern const dw_kernel_table dw_kernels_avx2, dw_kernels_avx512;
#endif

#endif

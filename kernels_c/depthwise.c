/* minigraph native depthwise convolutions (float32, NHWC): the drivers (see depthwise.h).
 *
 * How a call runs
 * ---------------
 * Forward: output rows (image, p) handed to threads in chunks; each row's pixels go through
 * the ISA's loop, DW_TILE pixels x one vector of channels per register tile where all taps
 * are inside the input, pixel by pixel at the borders (depthwise_template.h).
 * Input gradient: input rows likewise, the same tiles gathering from out_backprop the
 * pixels each input pixel's taps reach (with strides only some taps do; the columns of one
 * residue modulo the stride share their pattern, so they are tiled together).
 * Filter gradient: (image, vector of channels) items, each summing one image over its
 * output pixels (3x3 filters, and 5x5 on AVX-512: the sums in registers); then the images'
 * sums added in image order, in groups of images whose sums fit a bounded scratch.
 * With mult > 1 the forward and filter gradient first repeat each input channel mult times
 * (the loops then see one multiplier), the input gradient first moves the multiplier before
 * the channel in dy and f (depthwise_internal.h).
 *
 * Every output element is computed by one item in a fixed order, so the results do not
 * depend on the thread count or schedule. The loops are per ISA, one table each
 * (dw_kernel_table), picked once per call (mg_isa_pick).
 */
#include "depthwise.h"

#include <stdlib.h>
#include <string.h>

#include "depthwise_internal.h"
#include "mg_runtime.h"

static const dw_kernel_table *dw_kernels(void)
{
    static const void *const tables[MG_NISA] =
        MG_ISA_TABLES(&dw_kernels_scalar, &dw_kernels_avx2, &dw_kernels_avx512);
    return mg_isa_pick(tables);
}

/* One call: its geometry, the ISA's loops, the tensors and scratch the phases share. */
typedef struct {
    dw_geo g;
    const dw_kernel_table *tab;
    const float *x, *f, *dy; /* the loops' inputs (scratch copies when mult > 1) */
    const float *src;        /* a layout phase's source */
    float *dst;              /* its destination */
    int64_t inner;           /* its channels (of the source's last axis, / mult) */
    float *out;              /* the result */
    float *part;             /* filter gradient: per-image sums of the group */
    int64_t img0, nimg;      /* that group */
} dw_call;

typedef void (*range_fn)(dw_call *k, int64_t lo, int64_t hi);

/* fn over [0, count) in chunks handed to threads dynamically (the machine may be shared: a
 * thread that starts late takes fewer); which thread runs a chunk never changes a result. */
typedef struct {
    dw_call *k;
    range_fn fn;
} ranges_call;

static void range_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const ranges_call *c = ctx;
    c->fn(c->k, lo, hi);
}

static void parallel_ranges(dw_call *k, int nt, int64_t count, range_fn fn)
{
    ranges_call c = {k, fn};
    mg_pool_rows(nt, count, 1, range_chunk, &c);
}

/* a * b * c * d into *out, or 0 on int64 overflow */
static int product(int64_t a, int64_t b, int64_t c, int64_t d, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out) && !__builtin_mul_overflow(*out, c, out) &&
           !__builtin_mul_overflow(*out, d, out);
}

/* The geometry checks every entry point makes: sizes in [0, 2^31) (so no offset computed
 * from them overflows int64), windows, strides and dilations >= 1, tensor sizes that fit
 * int64; the input-, filter- and output-shaped buffers non-NULL when they hold anything.
 * Fills k. */
static int dw_setup(dw_call *k, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                    int64_t kw, int64_t mult, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                    int64_t pt, int64_t pl, int64_t oh, int64_t ow, const void *in,
                    const void *filter, const void *out)
{
    const int64_t v[15] = {n, h, w, c, kh, kw, mult, sh, sw, dh, dw, pt, pl, oh, ow};
    for (int i = 0; i < 15; ++i)
        if (v[i] < 0 || v[i] > INT32_MAX)
            return MG_EINVAL;
    int64_t nx, ny, nf;
    if (kh < 1 || kw < 1 || mult < 1 || sh < 1 || sw < 1 || dh < 1 || dw < 1 ||
        !product(n, h, w, c * mult, &nx) || !product(n, oh, ow, c * mult, &ny) ||
        !product(kh, kw, c, mult, &nf) || (nx && !in) || (nf && !filter) || (ny && !out))
        return MG_EINVAL;
    memset(k, 0, sizeof *k);
    k->g = (dw_geo){n, h, w, c, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow, 1};
    k->tab = dw_kernels();
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Layout phases (mult > 1)                                                                    */

/* Pixels [lo, hi) of src [pixels][inner]: each channel repeated mult times,
 * dst[p][c * mult + m] = src[p][c]. */
static void repeat_channels(dw_call *k, int64_t lo, int64_t hi)
{
    const int64_t c = k->inner, m = k->g.mult;
    for (int64_t p = lo; p < hi; ++p) {
        const float *s = k->src + p * c;
        float *d = k->dst + p * c * m;
        for (int64_t ci = 0; ci < c; ++ci)
            for (int64_t j = 0; j < m; ++j)
                d[ci * m + j] = s[ci];
    }
}

/* Pixels [lo, hi) of src [pixels][inner][mult] to dst [pixels][mult][inner]. */
static void multiplier_first(dw_call *k, int64_t lo, int64_t hi)
{
    const int64_t c = k->inner, m = k->g.mult;
    for (int64_t p = lo; p < hi; ++p) {
        const float *s = k->src + p * c * m;
        float *d = k->dst + p * c * m;
        for (int64_t ci = 0; ci < c; ++ci)
            for (int64_t j = 0; j < m; ++j)
                d[j * c + ci] = s[ci * m + j];
    }
}

/* dst = fn(src) over `pixels` pixels of `inner` channels, into a new scratch of
 * pixels * inner * mult floats (NULL when out of memory). */
static float *relayout(dw_call *k, int nt, range_fn fn, const float *src, int64_t pixels,
                       int64_t inner)
{
    float *dst = mg_alloc_floats(pixels * inner * k->g.mult);
    if (dst) {
        k->src = src, k->dst = dst, k->inner = inner;
        parallel_ranges(k, nt, pixels, fn);
    }
    return dst;
}

/* ------------------------------------------------------------------------------------------ */
/* Forward                                                                                     */

static void forward_rows(dw_call *k, int64_t lo, int64_t hi)
{
    k->tab->forward(&k->g, k->x, k->f, k->out, lo, hi);
}

int mg_depthwise_forward(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                         int64_t mult, int64_t sh, int64_t sw, int64_t dh, int64_t dw,
                         int64_t pad_top, int64_t pad_left, int64_t out_h, int64_t out_w,
                         const float *x, const float *f, float *y, int num_threads)
{
    dw_call k;
    int err = dw_setup(&k, n, h, w, c, kh, kw, mult, sh, sw, dh, dw, pad_top, pad_left,
                       out_h, out_w, x, f, y);
    if (err)
        return err;
    const int64_t ch = c * mult;
    const int nt = mg_work_threads(num_threads, (double)n * out_h * out_w * kh * kw * ch);
    k.g.mult = mult;
    float *xe = mult > 1 ? relayout(&k, nt, repeat_channels, x, n * h * w, c) : NULL;
    if (mult > 1 && !xe)
        return MG_ENOMEM;
    k.g.c = ch, k.g.mult = 1;
    k.x = xe ? xe : x, k.f = f, k.out = y;
    parallel_ranges(&k, nt, n * out_h, forward_rows);
    free(xe);
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* Input gradient                                                                              */

static void input_rows(dw_call *k, int64_t lo, int64_t hi)
{
    k->tab->backprop_input(&k->g, k->dy, k->f, k->out, lo, hi);
}

int mg_depthwise_backprop_input(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                                int64_t kw, int64_t mult, int64_t sh, int64_t sw, int64_t dh,
                                int64_t dw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                                int64_t out_w, const float *f, const float *dy, float *dx,
                                int num_threads)
{
    dw_call k;
    int err = dw_setup(&k, n, h, w, c, kh, kw, mult, sh, sw, dh, dw, pad_top, pad_left,
                       out_h, out_w, dx, f, dy);
    if (err)
        return err;
    const int nt = mg_work_threads(num_threads, (double)n * out_h * out_w * kh * kw * c * mult);
    k.g.mult = mult;
    float *dyt = NULL, *ft = NULL;
    if (mult > 1) {
        dyt = relayout(&k, nt, multiplier_first, dy, n * out_h * out_w, c);
        ft = relayout(&k, 1, multiplier_first, f, kh * kw, c);
    }
    if (mult > 1 && (!dyt || !ft)) {
        err = MG_ENOMEM;
    } else {
        k.dy = dyt ? dyt : dy, k.f = ft ? ft : f, k.out = dx;
        parallel_ranges(&k, nt, n * h, input_rows);
    }
    free(dyt);
    free(ft);
    return err;
}

/* ------------------------------------------------------------------------------------------ */
/* Filter gradient                                                                             */

enum { PART_FLOATS = 1 << 22 }; /* the per-image sums of a group: at most 16 MB */

/* items [lo, hi) of the group: (image, vector of channels) */
static void filter_items(dw_call *k, int64_t lo, int64_t hi)
{
    const int64_t lanes = k->tab->lanes, nvec = (k->g.c + lanes - 1) / lanes;
    const int64_t taps = k->g.kh * k->g.kw * k->g.c;
    for (int64_t it = lo; it < hi; ++it) {
        const int64_t i = it / nvec;
        k->tab->backprop_filter(&k->g, k->x, k->dy, k->part + i * taps, k->img0 + i,
                                it % nvec * lanes);
    }
}

/* df[t] for t in [lo, hi): the group's image sums added to it in image order (the first
 * image's sum is the start: a -0 stays -0) */
static void filter_sum(dw_call *k, int64_t lo, int64_t hi)
{
    const int64_t taps = k->g.kh * k->g.kw * k->g.c;
    int64_t i = 0;
    if (k->img0 == 0) {
        memcpy(k->out + lo, k->part + lo, (size_t)(hi - lo) * sizeof(float));
        i = 1;
    }
    for (; i < k->nimg; ++i) {
        const float *p = k->part + i * taps;
        for (int64_t t = lo; t < hi; ++t)
            k->out[t] += p[t];
    }
}

int mg_depthwise_backprop_filter(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                                 int64_t kw, int64_t mult, int64_t sh, int64_t sw,
                                 int64_t dh, int64_t dw, int64_t pad_top, int64_t pad_left,
                                 int64_t out_h, int64_t out_w, const float *x,
                                 const float *dy, float *df, int num_threads)
{
    dw_call k;
    int err = dw_setup(&k, n, h, w, c, kh, kw, mult, sh, sw, dh, dw, pad_top, pad_left,
                       out_h, out_w, x, df, dy);
    if (err)
        return err;
    const int64_t ch = c * mult, taps = kh * kw * ch;
    if (n == 0) {
        memset(df, 0, (size_t)taps * sizeof(float));
        return 0;
    }
    const int nt = mg_work_threads(num_threads, (double)n * out_h * out_w * kh * kw * ch);
    k.g.mult = mult;
    float *xe = mult > 1 ? relayout(&k, nt, repeat_channels, x, n * h * w, c) : NULL;
    const int64_t group = PART_FLOATS / (taps ? taps : 1);
    k.nimg = group < 1 ? 1 : group < n ? group : n;
    k.part = mg_alloc_floats(k.nimg * taps);
    if ((mult > 1 && !xe) || !k.part) {
        err = MG_ENOMEM;
    } else {
        k.g.c = ch, k.g.mult = 1;
        k.x = xe ? xe : x, k.dy = dy, k.out = df;
        const int64_t nvec = (ch + k.tab->lanes - 1) / k.tab->lanes;
        const int64_t per_group = k.nimg;
        for (k.img0 = 0; k.img0 < n; k.img0 += per_group) {
            k.nimg = n - k.img0 < per_group ? n - k.img0 : per_group;
            parallel_ranges(&k, nt, k.nimg * nvec, filter_items);
            parallel_ranges(&k, nt, taps, filter_sum);
        }
    }
    free(xe);
    free(k.part);
    return err;
}

/* minigraph native max pooling (float32); see pooling.h.
 *
 * Pools run over output rows (image, y), chunks of them on the worker pool. The
 * loops are per ISA, one table each (pool_kernel_table), picked once per call
 * (mg_isa_pick): pooling_template.h compiled for the baseline, AVX2 and AVX-512
 * (pooling_isa_*.c), AVX-512 with 2x2 windows in registers first. An NCHW tensor is pooled
 * as n * c single-channel NHWC images.
 */
#include "pooling.h"

#include <stdlib.h>
#include <string.h>

#include "mg_runtime.h"
#include "activations_internal.h"
#include "pooling_internal.h"


static const pool_kernel_table *pool_kernels(void)
{
    static const void *const tables[MG_NISA] =
        MG_ISA_TABLES(&pool_kernels_scalar, &pool_kernels_avx2, &pool_kernels_avx512);
    return mg_isa_pick(tables);
}

typedef struct {
    pool_rows_fn fn;
    const pool_geo *g;
} rows_call;

static void rows_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const rows_call *c = ctx;
    c->fn(c->g, lo, hi);
}

/* fn over output rows [0, rows) in chunks on the worker pool (rows are independent) */
static void run_rows(pool_rows_fn fn, const pool_geo *g, int64_t rows, int nt)
{
    rows_call c = {fn, g};
    mg_pool_rows(nt, rows, 1, rows_chunk, &c);
}

static int pool_setup(pool_geo *g, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                      int64_t kw, int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t oh,
                      int64_t ow, int channels_last, int64_t *rows)
{
    if (n < 0 || h < 0 || w < 0 || c < 0 || kh <= 0 || kw <= 0 || sh <= 0 || sw <= 0 ||
        pt < 0 || pl < 0 || pt >= kh || pl >= kw || oh < 0 || ow < 0)
        return MG_EINVAL;
    /* window geometry below 2^31 (so y * sh - pt + kh never overflows), and every window
     * starting inside the image: (out - 1) * stride - pad < size, as SAME, VALID and
     * EXPLICIT (pads < window) give; the 2x2 paths read row 2 * oy and column 2 * ox */
    if (kh > INT32_MAX || kw > INT32_MAX || sh > INT32_MAX || sw > INT32_MAX ||
        oh > INT32_MAX || ow > INT32_MAX || (oh > 0 && (oh - 1) * sh - pt >= h) ||
        (ow > 0 && (ow - 1) * sw - pl >= w))
        return MG_EINVAL;
    if (!channels_last) { /* n * c single-channel images */
        n *= c;
        c = 1;
    }
    g->h = h, g->w = w, g->c = c, g->kh = kh, g->kw = kw, g->sh = sh, g->sw = sw;
    g->pt = pt, g->pl = pl, g->oh = oh, g->ow = ow;
    *rows = n * oh;
    return 0;
}

/* A forward pool (fn: the table's max_pool or avg_pool): check the geometry and buffers,
 * then fn over the output rows */
static int pool_forward(pool_rows_fn fn, int64_t n, int64_t h, int64_t w, int64_t c,
                        int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t pad_top,
                        int64_t pad_left, int64_t out_h, int64_t out_w, int channels_last,
                        const float *x, float *y, int num_threads)
{
    pool_geo g = {.x = x, .y = y};
    int64_t rows;
    const int err = pool_setup(&g, n, h, w, c, kh, kw, sh, sw, pad_top, pad_left, out_h,
                               out_w, channels_last, &rows);
    if (err || (rows * out_w * g.c > 0 && (!x || !y)))
        return err ? err : MG_EINVAL;
    run_rows(fn, &g, rows, mg_stream_threads(num_threads, n * h * w * c));
    return 0;
}

int mg_max_pool(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                int64_t out_w, int channels_last, const float *x, float *y, int num_threads)
{
    return pool_forward(pool_kernels()->max_pool, n, h, w, c, kh, kw, sh, sw, pad_top,
                        pad_left, out_h, out_w, channels_last, x, y, num_threads);
}

/* The overlapping-window max-pool gradient: each output's argmax first (over output rows),
 * then each image's outputs scatter their gradients (over images: single-channel NCHW
 * planes always, NHWC while the images give every thread one), else every input row
 * gathers its gradients (over input rows); the same bits either way. 3x3/2 SAME over
 * 16x32x32x32 NHWC, one thread: gather 1.47 ms, scatter 0.3 ms. */
static int max_pool_grad_overlapping(pool_geo *geo, int64_t rows, int nt)
{
    const int64_t images = rows / (geo->oh ? geo->oh : 1);
    const int64_t outputs = rows * geo->ow * geo->c;
    geo->arg = malloc((size_t)(outputs ? outputs : 1) * sizeof(int64_t));
    if (!geo->arg)
        return MG_ENOMEM;
    const pool_kernel_table *t = pool_kernels();
    run_rows(t->max_pool_arg, geo, rows, nt);
    if (geo->c == 1 || images >= nt)
        run_rows(t->max_pool_grad_images, geo, images, nt);
    else
        run_rows(t->max_pool_grad_in, geo, images * geo->h, nt);
    free(geo->arg);
    return 0;
}

/* mg_max_pool_grad, and with `relu` mg_max_pool_grad_relu (ReluGrad's mask in each store) */
static int max_pool_grad(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                         int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left,
                         int64_t out_h, int64_t out_w, int channels_last, const float *x,
                         const float *g, float *dx, int relu, int num_threads)
{
    pool_geo geo = {.x = x, .g = g, .dx = dx, .relu = relu};
    int64_t rows;
    const int err = pool_setup(&geo, n, h, w, c, kh, kw, sh, sw, pad_top, pad_left, out_h,
                               out_w, channels_last, &rows);
    if (err)
        return err;
    if (n * h * w * c == 0)
        return 0;
    if (!x || !g || !dx)
        return MG_EINVAL;
    const int nt = mg_stream_threads(num_threads, n * h * w * c);
    if (out_h == 0 || out_w == 0) { /* no window: no gradient */
        memset(dx, 0, (size_t)(n * h * w * c) * sizeof(float));
        return 0;
    }
    if (sh < kh || sw < kw)
        return max_pool_grad_overlapping(&geo, rows, nt);
    /* the windows write every element they cover; zero the rest first unless they tile */
    if (!(sh == kh && sw == kw && out_h * sh - pad_top >= h && out_w * sw - pad_left >= w))
        memset(dx, 0, (size_t)(n * h * w * c) * sizeof(float));
    run_rows(pool_kernels()->max_pool_grad, &geo, rows, nt);
    return 0;
}

int mg_max_pool_grad(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                     int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                     int64_t out_w, int channels_last, const float *x, const float *g,
                     float *dx, int num_threads)
{
    return max_pool_grad(n, h, w, c, kh, kw, sh, sw, pad_top, pad_left, out_h, out_w,
                         channels_last, x, g, dx, 0, num_threads);
}

int mg_max_pool_grad_relu(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                          int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left,
                          int64_t out_h, int64_t out_w, int channels_last, const float *r,
                          const float *g, float *dx, int num_threads)
{
    return max_pool_grad(n, h, w, c, kh, kw, sh, sw, pad_top, pad_left, out_h, out_w,
                         channels_last, r, g, dx, 1, num_threads);
}

/* ------------------------------------------------------------------ Relu -> MaxPool fused */

static const act_kernel_table *act_kernels(void)
{
    static const void *const tables[MG_NISA] =
        MG_ISA_TABLES(&act_kernels_scalar, &act_kernels_avx2, &act_kernels_avx512);
    return mg_isa_pick(tables);
}

/* The input rows (image * h + y) whose Relu output row `row` (image * out_h + oy) writes:
 * [oy * sh - pt, (oy + 1) * sh - pt) clipped to the image, the first output row's from 0
 * and the last one's to h, so consecutive output rows own consecutive input rows and all of
 * them together own every input row once (each window starts inside the image). */
static void owned_rows(const pool_geo *g, int64_t row, int64_t *a, int64_t *b)
{
    const int64_t img = row / g->oh, oy = row % g->oh;
    int64_t lo = oy * g->sh - g->pt, hi = lo + g->sh;
    lo = oy == 0 || lo < 0 ? 0 : lo > g->h ? g->h : lo;
    hi = oy == g->oh - 1 || hi > g->h ? g->h : hi < 0 ? 0 : hi;
    *a = img * g->h + lo;
    *b = img * g->h + hi;
}

typedef struct {
    pool_rows_fn max_pool;
    act_unary_fn relu;
    const pool_geo *g;
    float *r;
    int64_t block; /* output rows per block */
} relu_pool_call;

/* The pool of output rows [lo, hi) marked for the fused Relu: an output whose window holds
 * only NaN set to NaN (returns whether one was). Relu(MaxPool(x)) is MaxPool(Relu(x)) bit for bit (Relu keeps NaN,
 * maps every other non-positive value, -0 included, to +0, and is monotone) except there:
 * MaxPool(Relu(x)) ignores the NaN and gives POOL_LOWEST, but Relu(POOL_LOWEST) = +0. A
 * pooled output is never NaN, so NaN marks those outputs through the Relu (restore_nan_
 * windows); only the rare outputs equal to POOL_LOWEST rescan their window. */
static int mark_nan_windows(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t c = g->c, count = (hi - lo) * g->ow * c;
    const float *y = g->y + lo * g->ow * c;
    int any = 0; /* (a branch-free scan first: the block's outputs are still in cache) */
    for (int64_t i = 0; i < count; ++i)
        any |= y[i] == POOL_LOWEST;
    if (!any)
        return 0;
    int marked = 0;
    for (int64_t row = lo; row < hi; ++row) {
        int64_t img, ya, yb;
        window_rows(g, row, &img, &ya, &yb);
        for (int64_t ox = 0; ox < g->ow; ++ox) {
            float *o = g->y + (row * g->ow + ox) * c;
            int64_t xa, xb;
            window_cols(g, ox, &xa, &xb);
            for (int64_t ci = 0; ci < c; ++ci) {
                if (o[ci] != POOL_LOWEST)
                    continue;
                int all_nan = 1;
                for (int64_t yy = ya; yy < yb && all_nan; ++yy)
                    for (int64_t xx = xa; xx < xb && all_nan; ++xx) {
                        const float v = g->x[((img * g->h + yy) * g->w + xx) * c + ci];
                        all_nan = v != v;
                    }
                if (all_nan)
                    o[ci] = __builtin_nanf(""), marked = 1;
            }
        }
    }
    return marked;
}

/* the NaN marks of mark_nan_windows back to POOL_LOWEST, MaxPool(Relu(x))'s value there */
static void restore_nan_windows(float *y, int64_t count)
{
    for (int64_t i = 0; i < count; ++i)
        y[i] = y[i] != y[i] ? POOL_LOWEST : y[i];
}

/* Output rows [lo, hi), a block at a time (the block's input still in cache): the max pool
 * of x, its Relu in place (all-NaN windows kept at POOL_LOWEST), then the Relu of the input
 * rows the block owns into r */
static void relu_pool_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const relu_pool_call *c = ctx;
    const pool_geo *g = c->g;
    const int64_t out_row = g->ow * g->c, in_row = g->w * g->c;
    for (int64_t b = lo; b < hi; b += c->block) {
        const int64_t e = hi - b < c->block ? hi : b + c->block;
        int64_t a0, a1, z0, z1;
        c->max_pool(g, b, e);
        const int marked = mark_nan_windows(g, b, e);
        c->relu(g->y + b * out_row, g->y + b * out_row, (e - b) * out_row, 0.0f);
        if (marked)
            restore_nan_windows(g->y + b * out_row, (e - b) * out_row);
        owned_rows(g, b, &a0, &a1);
        owned_rows(g, e - 1, &z0, &z1);
        c->relu(g->x + a0 * in_row, c->r + a0 * in_row, (z1 - a0) * in_row, 0.0f);
    }
}

int mg_relu_max_pool(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                     int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                     int64_t out_w, int channels_last, const float *x, float *y, float *r,
                     int num_threads)
{
    pool_geo g = {.x = x, .y = y};
    int64_t rows;
    const int err = pool_setup(&g, n, h, w, c, kh, kw, sh, sw, pad_top, pad_left, out_h,
                               out_w, channels_last, &rows);
    if (err)
        return err;
    const int64_t size = n * h * w * c;
    if (size > 0 && (!x || !r || (rows * out_w * g.c > 0 && !y)))
        return MG_EINVAL;
    const act_kernel_table *t = act_kernels();
    if (rows * out_w == 0) { /* no window: the Relu alone */
        if (size > 0)
            t->unary[ACT_relu](x, r, size, 0.0f);
        return 0;
    }
    /* blocks of about 16 KiB of input rows */
    const int64_t per_row = (sh < kh ? sh : kh) * w * g.c * (int64_t)sizeof(float);
    relu_pool_call call = {pool_kernels()->max_pool, t->unary[ACT_relu], &g, r,
                           per_row >= (1 << 14) ? 1 : (1 << 14) / (per_row ? per_row : 1)};
    mg_pool_rows(mg_stream_threads(num_threads, size), rows, 1, relu_pool_chunk, &call);
    return 0;
}

int mg_avg_pool(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                int64_t out_w, int channels_last, const float *x, float *y, int num_threads)
{
    return pool_forward(pool_kernels()->avg_pool, n, h, w, c, kh, kw, sh, sw, pad_top,
                        pad_left, out_h, out_w, channels_last, x, y, num_threads);
}

int mg_avg_pool_grad(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                     int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                     int64_t out_w, int channels_last, const float *g, float *dx,
                     int num_threads)
{
    pool_geo geo = {.g = g, .dx = dx};
    int64_t rows;
    const int err = pool_setup(&geo, n, h, w, c, kh, kw, sh, sw, pad_top, pad_left, out_h,
                               out_w, channels_last, &rows);
    if (err)
        return err;
    if (n * h * w * c == 0)
        return 0;
    if (!dx || (rows * out_w * geo.c > 0 && !g))
        return MG_EINVAL;
    const int64_t images = channels_last ? n : n * c;
    run_rows(pool_kernels()->avg_pool_grad_in, &geo, images * h,
             mg_stream_threads(num_threads, n * h * w * c));
    return 0;
}

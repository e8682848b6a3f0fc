/* minigraph native image resize (float32, NHWC); see image.h.
 *
 * Both resizes run over output rows (image, y), chunks of them on the worker pool. Nearest
 * copies each output pixel's c floats from its source pixel; bilinear's loop is per ISA
 * (image_template.h compiled for the baseline, AVX2 and AVX-512, image_isa_*.c), picked
 * once per call (mg_isa_pick). The index tables are checked once per call, so a row never
 * reads outside its image.
 */
#include "image.h"

#include <string.h>

#include "image_internal.h"
#include "mg_runtime.h"

static const image_kernel_table *image_kernels(void)
{
    static const void *const tables[MG_NISA] =
        MG_ISA_TABLES(&image_kernels_scalar, &image_kernels_avx2, &image_kernels_avx512);
    return mg_isa_pick(tables);
}

/* every entry of table[0 .. count) lies in [0, limit) (a NULL table only when empty) */
static int indices_ok(const int64_t *table, int64_t count, int64_t limit)
{
    if (count && !table)
        return 0;
    for (int64_t i = 0; i < count; ++i)
        if (table[i] < 0 || table[i] >= limit)
            return 0;
    return 1;
}

/* the sizes, the buffers and the tables of a call; returns the output row count or -1 */
static int64_t resize_setup(resize_geo *g, int64_t n, int64_t h, int64_t w, int64_t c,
                            int64_t oh, int64_t ow, const float *x, float *y)
{
    if (n < 0 || h < 0 || w < 0 || c < 0 || oh < 0 || ow < 0)
        return -1;
    const int64_t out_count = n * oh * ow * c;
    if (out_count && (!y || !x))
        return -1;
    g->h = h, g->w = w, g->c = c, g->oh = oh, g->ow = ow, g->x = x, g->y = y;
    if (!indices_ok(g->y_lower, oh, h) || !indices_ok(g->x_lower, ow, w))
        return -1;
    return out_count ? n * oh : 0;
}

typedef struct {
    resize_rows_fn fn;
    const resize_geo *g;
} rows_call;

static void rows_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const rows_call *call = ctx;
    call->fn(call->g, lo, hi);
}

static void run_rows(resize_rows_fn fn, const resize_geo *g, int64_t rows, int num_threads)
{
    rows_call call = {fn, g};
    mg_pool_rows(mg_stream_threads(num_threads, rows * g->ow * g->c), rows, 1, rows_chunk,
                 &call);
}

static void nearest_rows(const resize_geo *g, int64_t lo, int64_t hi)
{
    const int64_t c = g->c, row_in = g->w * c, row_out = g->ow * c;
    for (int64_t row = lo; row < hi; ++row) {
        const int64_t image = row / g->oh, i = row % g->oh;
        const float *source = g->x + (image * g->h + g->y_lower[i]) * row_in;
        float *out = g->y + row * row_out;
        for (int64_t j = 0; j < g->ow; ++j)
            memcpy(out + j * c, source + g->x_lower[j] * c, (size_t)c * sizeof(float));
    }
}

int mg_resize_nearest(int64_t n, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                      const int64_t *rows, const int64_t *cols, const float *x, float *y,
                      int num_threads)
{
    resize_geo g = {.y_lower = rows, .x_lower = cols};
    const int64_t count = resize_setup(&g, n, h, w, c, oh, ow, x, y);
    if (count < 0)
        return MG_EINVAL;
    run_rows(nearest_rows, &g, count, num_threads);
    return MG_OK;
}

int mg_resize_bilinear(int64_t n, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                       const int64_t *y_lower, const int64_t *y_upper, const int64_t *x_lower,
                       const int64_t *x_upper, const float *y_lerp, const float *x_lerp,
                       const float *x, float *y, int num_threads)
{
    resize_geo g = {.y_lower = y_lower, .y_upper = y_upper, .x_lower = x_lower,
                    .x_upper = x_upper, .y_lerp = y_lerp, .x_lerp = x_lerp};
    const int64_t count = resize_setup(&g, n, h, w, c, oh, ow, x, y);
    if (count < 0 || !indices_ok(y_upper, oh, h) || !indices_ok(x_upper, ow, w) ||
        (oh && !y_lerp) || (ow && !x_lerp))
        return MG_EINVAL;
    run_rows(image_kernels()->bilinear, &g, count, num_threads);
    return MG_OK;
}

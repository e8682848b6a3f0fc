/* minigraph native MaxPool3DGrad: see pool3d_grad.h. Rows of dx ([n][d][h], w * c floats
 * each) go to the worker pool; an input voxel walks its covering outputs in TF's order, the
 * channels in the innermost loop. */
#include "pool3d_grad.h"

#include <math.h>
#include <string.h>

typedef struct {
    int64_t n, c, in[3], k[3], s[3], pad[3], out[3];
    const float *x, *y, *g;
    float *dx;
} grad_call;

/* The outputs [*lo, *hi) covering input index i along dim dd */
static void covering(const grad_call *gc, int dd, int64_t i, int64_t *lo, int64_t *hi)
{
    const int64_t s = gc->s[dd], t = i + gc->pad[dd]; /* o * s <= t < o * s + k */
    const int64_t first = t - gc->k[dd] + 1 <= 0 ? 0 : (t - gc->k[dd] + 1 + s - 1) / s;
    const int64_t last = t / s + 1;
    *lo = first;
    *hi = last < gc->out[dd] ? last : gc->out[dd];
}

static void grad_rows(void *ctx, int64_t lo, int64_t hi)
{
    const grad_call *gc = ctx;
    const float tol = 1e-5f;
    const int64_t c = gc->c, od = gc->out[0], oh = gc->out[1], ow = gc->out[2];
    for (int64_t row = lo; row < hi; ++row) {
        const int64_t r = row % gc->in[1], z = row / gc->in[1] % gc->in[0];
        const int64_t img = row / (gc->in[0] * gc->in[1]);
        int64_t d0, d1, h0, h1;
        covering(gc, 0, z, &d0, &d1);
        covering(gc, 1, r, &h0, &h1);
        for (int64_t q = 0; q < gc->in[2]; ++q) {
            const int64_t at = (row * gc->in[2] + q) * c;
            float *dst = gc->dx + at;
            const float *xv = gc->x + at;
            memset(dst, 0, (size_t)c * sizeof(float));
            int64_t w0, w1;
            covering(gc, 2, q, &w0, &w1);
            for (int64_t pw = w0; pw < w1; ++pw)
                for (int64_t ph = h0; ph < h1; ++ph)
                    for (int64_t pd = d0; pd < d1; ++pd) {
                        const int64_t o = (((img * od + pd) * oh + ph) * ow + pw) * c;
                        const float *yv = gc->y + o, *gv = gc->g + o;
                        for (int64_t ci = 0; ci < c; ++ci)
                            if (fabsf(xv[ci] - yv[ci]) < tol)
                                dst[ci] += gv[ci];
                    }
        }
    }
}

int mg_max_pool3d_grad(const int64_t sizes[17], const float *x, const float *y,
                       const float *g, float *dx, int num_threads)
{
    if (!sizes)
        return MG_EINVAL;
    grad_call gc = {sizes[0], sizes[1], {0}, {0}, {0}, {0}, {0}, x, y, g, dx};
    for (int dd = 0; dd < 3; ++dd) {
        gc.in[dd] = sizes[2 + dd];
        gc.k[dd] = sizes[5 + dd];
        gc.s[dd] = sizes[8 + dd];
        gc.pad[dd] = sizes[11 + dd];
        gc.out[dd] = sizes[14 + dd];
        if (gc.in[dd] < 0 || gc.k[dd] < 1 || gc.s[dd] < 1 || gc.pad[dd] < 0 || gc.out[dd] < 0)
            return MG_EINVAL;
    }
    if (gc.n < 0 || gc.c < 0)
        return MG_EINVAL;
    const int64_t rows = gc.n * gc.in[0] * gc.in[1], size = rows * gc.in[2] * gc.c;
    if (!size)
        return MG_OK;
    const int64_t outs = gc.n * gc.out[0] * gc.out[1] * gc.out[2] * gc.c;
    if (!dx || !x || (outs != 0 && (!y || !g)))
        return MG_EINVAL;
    mg_pool_rows(mg_stream_threads(num_threads, size * 4), rows, 1, grad_rows, &gc);
    return MG_OK;
}

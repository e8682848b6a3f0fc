/* minigraph native MaxPool3DGrad and MaxPool3DGradGrad: see pool3d_grad.h. Rows of the
 * result ([n][d][h] of dx, [n][od][oh] of the output; w * c floats each) go to the worker
 * pool; an input voxel walks its covering outputs in TF's order, an output voxel its window
 * row-major, the channels in the innermost loop. */
#include "pool3d_grad.h"

#include <math.h>
#include <string.h>

typedef struct {
    int64_t n, c, in[3], k[3], s[3], pad[3], out[3];
    const float *x, *y, *g;
    float *dx; /* the result: dx, or the output of MaxPool3DGradGrad */
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

/* out rows [lo, hi) of MaxPool3DGradGrad */
static void grad_grad_rows(void *ctx, int64_t lo, int64_t hi)
{
    const grad_call *gc = ctx;
    const int64_t c = gc->c, od = gc->out[0], oh = gc->out[1], ow = gc->out[2];
    unsigned char found[256];
    for (int64_t row = lo; row < hi; ++row) {
        const int64_t ph = row % oh, pd = row / oh % od, img = row / (od * oh);
        for (int64_t pw = 0; pw < ow; ++pw) {
            const int64_t o = ((row * ow) + pw) * c;
            float *dst = gc->dx + o;
            const float *yv = gc->y + o;
            for (int64_t c0 = 0; c0 < c; c0 += 256) { /* channels in blocks of 256 */
                const int64_t cn = c - c0 < 256 ? c - c0 : 256;
                memset(found, 0, (size_t)cn);
                memset(dst + c0, 0, (size_t)cn * sizeof(float));
                for (int64_t a0 = 0; a0 < gc->k[0]; ++a0) {
                    const int64_t z = pd * gc->s[0] - gc->pad[0] + a0;
                    for (int64_t a1 = 0; z >= 0 && z < gc->in[0] && a1 < gc->k[1]; ++a1) {
                        const int64_t r = ph * gc->s[1] - gc->pad[1] + a1;
                        for (int64_t a2 = 0; r >= 0 && r < gc->in[1] && a2 < gc->k[2]; ++a2) {
                            const int64_t q = pw * gc->s[2] - gc->pad[2] + a2;
                            if (q < 0 || q >= gc->in[2])
                                continue;
                            const int64_t at =
                                (((img * gc->in[0] + z) * gc->in[1] + r) * gc->in[2] + q) * c + c0;
                            for (int64_t ci = 0; ci < cn; ++ci)
                                if (!found[ci] && gc->x[at + ci] == yv[c0 + ci]) {
                                    found[ci] = 1;
                                    dst[c0 + ci] = gc->g[at + ci];
                                }
                        }
                    }
                }
            }
        }
    }
}

/* The call's geometry from sizes, checked: MG_OK or MG_EINVAL */
static int read_sizes(const int64_t sizes[17], grad_call *gc)
{
    if (!sizes || sizes[0] < 0 || sizes[1] < 0)
        return MG_EINVAL;
    gc->n = sizes[0];
    gc->c = sizes[1];
    for (int dd = 0; dd < 3; ++dd) {
        gc->in[dd] = sizes[2 + dd];
        gc->k[dd] = sizes[5 + dd];
        gc->s[dd] = sizes[8 + dd];
        gc->pad[dd] = sizes[11 + dd];
        gc->out[dd] = sizes[14 + dd];
        if (gc->in[dd] < 0 || gc->k[dd] < 1 || gc->s[dd] < 1 || gc->pad[dd] < 0 ||
            gc->out[dd] < 0)
            return MG_EINVAL;
    }
    return MG_OK;
}

int mg_max_pool3d_grad_grad(const int64_t sizes[17], const float *x, const float *y,
                            const float *g, float *out, int num_threads)
{
    grad_call gc = {0, 0, {0}, {0}, {0}, {0}, {0}, x, y, g, out};
    if (read_sizes(sizes, &gc) != MG_OK)
        return MG_EINVAL;
    const int64_t rows = gc.n * gc.out[0] * gc.out[1], size = rows * gc.out[2] * gc.c;
    if (!size)
        return MG_OK;
    if (!out || !y || (gc.n * gc.in[0] * gc.in[1] * gc.in[2] * gc.c != 0 && (!x || !g)))
        return MG_EINVAL;
    mg_pool_rows(mg_stream_threads(num_threads, size * 4), rows, 1, grad_grad_rows, &gc);
    return MG_OK;
}

int mg_max_pool3d_grad(const int64_t sizes[17], const float *x, const float *y,
                       const float *g, float *dx, int num_threads)
{
    grad_call gc = {0, 0, {0}, {0}, {0}, {0}, {0}, x, y, g, dx};
    if (read_sizes(sizes, &gc) != MG_OK)
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

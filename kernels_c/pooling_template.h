/* The pooling loops, written once and instantiated per ISA by pooling_isa_<isa>.c (the
 * compiler vectorizes them for the ISA's target). An ISA may handle some geometries itself
 * first: it defines POOL_FAST_MAX(g, lo, hi) and POOL_FAST_MAX_GRAD(g, lo, hi) (returning 1
 * when they did the rows) before including this file (pooling_isa_avx512.c: 2x2 windows).
 *
 * Needs: MG_ISA_NAME (the ISA's name token: defines pool_kernels_<isa>).
 */
#define FN(name) MG_ISA_FN(name)

enum { CB = 64 }; /* channels per block of the argmax loops */

/* Single-channel images (NCHW planes): scalar windows. */
static void FN(max_pool_c1)(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t h = g->h, w = g->w, kh = g->kh, kw = g->kw;
    for (int64_t row = lo; row < hi; ++row) {
        int64_t img, ya, yb;
        window_rows(g, row, &img, &ya, &yb);
        const float *plane = g->x + img * h * w;
        float *out = g->y + row * g->ow;
        if (kh == 2 && kw == 2 && g->sw == 2 && g->pl == 0 && yb - ya == 2) {
            const float *r0 = plane + ya * w, *r1 = r0 + w;
            int64_t ox = 0;
            for (; ox < g->ow && 2 * ox + 1 < w; ++ox) {
                float b = pool_max(POOL_LOWEST, r0[2 * ox]);
                b = pool_max(b, r0[2 * ox + 1]);
                b = pool_max(b, r1[2 * ox]);
                out[ox] = pool_max(b, r1[2 * ox + 1]);
            }
            for (; ox < g->ow; ++ox) /* a last window cut by the right edge */
                out[ox] = pool_max(pool_max(POOL_LOWEST, r0[2 * ox]), r1[2 * ox]);
            continue;
        }
        /* outputs [in0, in1) have whole windows (no column clipped): a window offset at a
         * time over all of them, branch-free selects the compiler vectorizes (a data-
         * dependent branch per element mispredicts on real data); each output still scans
         * its window in row-major order, so the same NaN and signed-zero picks */
        const int64_t sw = g->sw, pl = g->pl;
        int64_t in0, in1;
        whole_cols(g, &in0, &in1);
        /* no whole window: kw may exceed the row by far (a clipped 2^31 - 1 window) */
        for (int64_t yy = ya; in1 > in0 && yy < yb; ++yy)
            for (int64_t dx = 0; dx < kw; ++dx) {
                const float *restrict src = plane + yy * w + dx - pl;
                float *restrict o = out;
                if (yy == ya && dx == 0)
                    for (int64_t ox = in0; ox < in1; ++ox)
                        o[ox] = pool_max(POOL_LOWEST, src[ox * sw]);
                else
                    for (int64_t ox = in0; ox < in1; ++ox) {
                        const float v = src[ox * sw], b = o[ox];
                        o[ox] = pool_max(b, v);
                    }
            }
        for (int64_t ox = 0; ox < g->ow; ++ox) { /* the clipped windows */
            if (ox == in0)
                ox = in1;
            if (ox >= g->ow)
                break;
            int64_t xa, xb;
            window_cols(g, ox, &xa, &xb);
            float b = POOL_LOWEST;
            for (int64_t yy = ya; yy < yb; ++yy)
                for (int64_t xx = xa; xx < xb; ++xx)
                    b = pool_max(b, plane[yy * w + xx]);
            out[ox] = b;
        }
    }
}

static void FN(max_pool_grad_c1)(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t h = g->h, w = g->w;
    for (int64_t row = lo; row < hi; ++row) {
        int64_t img, ya, yb;
        window_rows(g, row, &img, &ya, &yb);
        const float *plane = g->x + img * h * w;
        float *dplane = g->dx + img * h * w;
        const float *grad = g->g + row * g->ow;
        for (int64_t ox = 0; ox < g->ow; ++ox) {
            int64_t xa, xb;
            window_cols(g, ox, &xa, &xb);
            int64_t at = -1;
            float b = 0.0f;
            for (int64_t yy = ya; yy < yb; ++yy)
                for (int64_t xx = xa; xx < xb; ++xx) {
                    const float v = plane[yy * w + xx];
                    if (at < 0 || v > b)
                        b = v, at = yy * w + xx;
                    dplane[yy * w + xx] = 0.0f;
                }
            if (at >= 0)
                dplane[at] = relu_gate(g, 0.0f + grad[ox], plane[at]);
        }
    }
}

/* Several channels (NHWC): the compiler vectorizes the channel loops. */
static void FN(max_pool_channels)(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t c = g->c;
    for (int64_t row = lo; row < hi; ++row) {
        int64_t img, ya, yb;
        window_rows(g, row, &img, &ya, &yb);
        for (int64_t ox = 0; ox < g->ow; ++ox) {
            int64_t xa, xb;
            window_cols(g, ox, &xa, &xb);
            float *restrict o = g->y + (row * g->ow + ox) * c;
            for (int64_t ci = 0; ci < c; ++ci)
                o[ci] = POOL_LOWEST;
            for (int64_t yy = ya; yy < yb; ++yy)
                for (int64_t xx = xa; xx < xb; ++xx) {
                    const float *restrict s = g->x + ((img * g->h + yy) * g->w + xx) * c;
                    for (int64_t ci = 0; ci < c; ++ci)
                        o[ci] = pool_max(o[ci], s[ci]);
                }
        }
    }
}

/* max pool gradient of output rows [lo, hi): every in-bounds element of each window gets
 * 0 + g at the window's first maximum and +0 elsewhere */
static void FN(max_pool_grad_channels)(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t c = g->c;
    float best[CB];
    int32_t arg[CB];
    for (int64_t row = lo; row < hi; ++row) {
        int64_t img, ya, yb;
        window_rows(g, row, &img, &ya, &yb);
        for (int64_t ox = 0; ox < g->ow; ++ox) {
            int64_t xa, xb;
            window_cols(g, ox, &xa, &xb);
            const float *restrict gg = g->g + (row * g->ow + ox) * c;
            for (int64_t c0 = 0; c0 < c; c0 += CB) {
                const int64_t cl = c - c0 < CB ? c - c0 : CB;
                int32_t k = 0;
                for (int64_t yy = ya; yy < yb; ++yy)
                    for (int64_t xx = xa; xx < xb; ++xx, ++k) {
                        const float *restrict s =
                            g->x + ((img * g->h + yy) * g->w + xx) * c + c0;
                        if (k == 0) {
                            for (int64_t ci = 0; ci < cl; ++ci) {
                                best[ci] = s[ci];
                                arg[ci] = 0;
                            }
                        } else {
                            for (int64_t ci = 0; ci < cl; ++ci) {
                                const float v = s[ci];
                                const int take = v > best[ci];
                                best[ci] = take ? v : best[ci];
                                arg[ci] = take ? k : arg[ci];
                            }
                        }
                    }
                k = 0;
                for (int64_t yy = ya; yy < yb; ++yy)
                    for (int64_t xx = xa; xx < xb; ++xx, ++k) {
                        const int64_t at = ((img * g->h + yy) * g->w + xx) * c + c0;
                        float *restrict d = g->dx + at;
                        const float *restrict s = g->x + at;
                        if (g->relu) /* ReluGrad's mask in the same store */
                            for (int64_t ci = 0; ci < cl; ++ci) {
                                const float v = 0.0f + gg[c0 + ci];
                                d[ci] = arg[ci] != k ? 0.0f : s[ci] > 0.0f ? v : v * 0.0f;
                            }
                        else
                            for (int64_t ci = 0; ci < cl; ++ci)
                                d[ci] = arg[ci] == k ? 0.0f + gg[c0 + ci] : 0.0f;
                    }
            }
        }
    }
}

/* max_pool_arg of single-channel images (NCHW planes): the outputs with whole windows a
 * window offset at a time over a block of a row's outputs, branch-free selects (each output
 * still scans its window row-major), the clipped ones alone */
static void FN(max_pool_arg_c1)(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t w = g->w, kw = g->kw, sw = g->sw, pl = g->pl;
    int64_t in0, in1;
    whole_cols(g, &in0, &in1);
    float best[CB];
    for (int64_t row = lo; row < hi; ++row) {
        int64_t img, ya, yb;
        window_rows(g, row, &img, &ya, &yb);
        const float *plane = g->x + img * g->h * w;
        int64_t *restrict arg = g->arg + row * g->ow;
        for (int64_t o0 = in0; o0 < in1; o0 += CB) {
            const int64_t n = in1 - o0 < CB ? in1 - o0 : CB;
            for (int64_t yy = ya; yy < yb; ++yy)
                for (int64_t dx = 0; dx < kw; ++dx) {
                    const int64_t at = yy * w + dx - pl + o0 * sw;
                    const float *restrict src = plane + at;
                    int64_t *restrict a = arg + o0;
                    if (yy == ya && dx == 0)
                        for (int64_t j = 0; j < n; ++j) {
                            best[j] = src[j * sw];
                            a[j] = at + j * sw;
                        }
                    else
                        for (int64_t j = 0; j < n; ++j) {
                            const float v = src[j * sw];
                            const int take = v > best[j];
                            best[j] = take ? v : best[j];
                            a[j] = take ? at + j * sw : a[j];
                        }
                }
        }
        for (int64_t ox = 0; ox < g->ow; ++ox) { /* the clipped windows */
            if (ox == in0)
                ox = in1;
            if (ox >= g->ow)
                break;
            int64_t xa, xb;
            window_cols(g, ox, &xa, &xb);
            int64_t at = -1;
            float b = 0.0f;
            for (int64_t yy = ya; yy < yb; ++yy)
                for (int64_t xx = xa; xx < xb; ++xx) {
                    const float v = plane[yy * w + xx];
                    if (at < 0 || v > b)
                        b = v, at = yy * w + xx;
                }
            arg[ox] = at;
        }
    }
}

/* Each output's first maximum (the scan of max_pool_grad_channels: strict >, so a NaN
 * first element stays and a later NaN never wins) as yy * w + xx, into g->arg (the output's
 * layout); -1 for an empty window. */
static void FN(max_pool_arg)(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t c = g->c;
    if (c == 1) {
        FN(max_pool_arg_c1)(g, lo, hi);
        return;
    }
    float best[CB];
    for (int64_t row = lo; row < hi; ++row) {
        int64_t img, ya, yb;
        window_rows(g, row, &img, &ya, &yb);
        for (int64_t ox = 0; ox < g->ow; ++ox) {
            int64_t xa, xb;
            window_cols(g, ox, &xa, &xb);
            int64_t *restrict arg = g->arg + (row * g->ow + ox) * c;
            for (int64_t c0 = 0; c0 < c; c0 += CB) {
                const int64_t cl = c - c0 < CB ? c - c0 : CB;
                for (int64_t ci = 0; ci < cl; ++ci)
                    arg[c0 + ci] = -1;
                for (int64_t yy = ya; yy < yb; ++yy)
                    for (int64_t xx = xa; xx < xb; ++xx) {
                        const float *restrict s =
                            g->x + ((img * g->h + yy) * g->w + xx) * c + c0;
                        const int64_t at = yy * g->w + xx;
                        for (int64_t ci = 0; ci < cl; ++ci) {
                            const int take = arg[c0 + ci] < 0 || s[ci] > best[ci];
                            best[ci] = take ? s[ci] : best[ci];
                            arg[c0 + ci] = take ? at : arg[c0 + ci];
                        }
                    }
            }
        }
    }
}

/* dx of input rows [lo, hi): for each element, +0 plus the gradients of the outputs whose
 * first maximum it is, from the last output (row-major) to the first: the numpy kernel's
 * order (np.add.at over the outputs reversed) */
static void FN(max_pool_grad_in)(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t c = g->c;
    float acc[CB];
    for (int64_t row = lo; row < hi; ++row) {
        const int64_t img = row / g->h, iy = row % g->h;
        int64_t oya, oyb;
        covering(iy, g->kh, g->sh, g->pt, g->oh, &oya, &oyb);
        for (int64_t ix = 0; ix < g->w; ++ix) {
            int64_t oxa, oxb;
            covering(ix, g->kw, g->sw, g->pl, g->ow, &oxa, &oxb);
            const int64_t at = iy * g->w + ix;
            float *restrict d = g->dx + (row * g->w + ix) * c;
            for (int64_t c0 = 0; c0 < c; c0 += CB) {
                const int64_t cl = c - c0 < CB ? c - c0 : CB;
                for (int64_t ci = 0; ci < cl; ++ci)
                    acc[ci] = 0.0f;
                for (int64_t oy = oyb - 1; oy >= oya; --oy)
                    for (int64_t ox = oxb - 1; ox >= oxa; --ox) {
                        const int64_t o = ((img * g->oh + oy) * g->ow + ox) * c + c0;
                        const int64_t *restrict arg = g->arg + o;
                        const float *restrict gg = g->g + o;
                        for (int64_t ci = 0; ci < cl; ++ci)
                            acc[ci] += arg[ci] == at ? gg[ci] : 0.0f;
                    }
                if (g->relu) { /* ReluGrad's mask in the same store */
                    const float *restrict s = g->x + (row * g->w + ix) * c + c0;
                    for (int64_t ci = 0; ci < cl; ++ci)
                        d[c0 + ci] = s[ci] > 0.0f ? acc[ci] : acc[ci] * 0.0f;
                } else {
                    for (int64_t ci = 0; ci < cl; ++ci)
                        d[c0 + ci] = acc[ci];
                }
            }
        }
    }
}

/* dx of images [lo, hi) (overlapping windows) from arg and g: each image's dx zeroed, then
 * every output's gradient added at its first maximum from the last output (row-major) to
 * the first, so each element gets +0 plus its gradients in max_pool_grad_in's order (the
 * same bits) without a data-dependent branch per element or a scan of every covering
 * window per input; then ReluGrad's mask where g->relu */
static void FN(max_pool_grad_images)(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t c = g->c, size = g->h * g->w * c, outputs = g->oh * g->ow;
    for (int64_t img = lo; img < hi; ++img) {
        float *restrict d = g->dx + img * size;
        const int64_t *restrict arg = g->arg + img * outputs * c;
        const float *restrict grad = g->g + img * outputs * c;
        for (int64_t i = 0; i < size; ++i)
            d[i] = 0.0f;
        for (int64_t o = outputs - 1; o >= 0; --o)
            for (int64_t ci = 0; ci < c; ++ci) {
                const int64_t at = arg[o * c + ci];
                if (at >= 0)
                    d[at * c + ci] += grad[o * c + ci];
            }
        if (g->relu) {
            const float *restrict x = g->x + img * size;
            for (int64_t i = 0; i < size; ++i)
                d[i] = x[i] > 0.0f ? d[i] : d[i] * 0.0f;
        }
    }
}

/* Average pool of output rows [lo, hi): +0 plus, column after column of the window, that
 * column's in-bounds elements summed top to bottom from +0 (the numpy kernel's height pass,
 * then its width pass), divided by the in-bounds count */
static void FN(avg_pool)(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t c = g->c;
    float acc[CB], col[CB];
    for (int64_t row = lo; row < hi; ++row) {
        int64_t img, ya, yb;
        window_rows(g, row, &img, &ya, &yb);
        for (int64_t ox = 0; ox < g->ow; ++ox) {
            int64_t xa, xb;
            window_cols(g, ox, &xa, &xb);
            const float count = (float)((yb - ya) * (xb - xa));
            float *restrict o = g->y + (row * g->ow + ox) * c;
            for (int64_t c0 = 0; c0 < c; c0 += CB) {
                const int64_t cl = c - c0 < CB ? c - c0 : CB;
                for (int64_t ci = 0; ci < cl; ++ci)
                    acc[ci] = 0.0f;
                for (int64_t xx = xa; xx < xb; ++xx) {
                    for (int64_t ci = 0; ci < cl; ++ci)
                        col[ci] = 0.0f;
                    for (int64_t yy = ya; yy < yb; ++yy) {
                        const float *restrict s =
                            g->x + ((img * g->h + yy) * g->w + xx) * c + c0;
                        for (int64_t ci = 0; ci < cl; ++ci)
                            col[ci] += s[ci];
                    }
                    for (int64_t ci = 0; ci < cl; ++ci)
                        acc[ci] += col[ci];
                }
                for (int64_t ci = 0; ci < cl; ++ci)
                    o[c0 + ci] = acc[ci] / count;
            }
        }
    }
}

/* Average pool gradient of input rows [lo, hi): each covering output's g / count (float32
 * quotients), the outputs of one output row added from the last column to the first from +0,
 * those row sums added from the last output row to the first from +0 (the numpy kernel's
 * width spread, then its height spread) */
static void FN(avg_pool_grad_in)(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t c = g->c;
    float acc[CB], part[CB];
    for (int64_t row = lo; row < hi; ++row) {
        const int64_t img = row / g->h, iy = row % g->h;
        int64_t oya, oyb;
        covering(iy, g->kh, g->sh, g->pt, g->oh, &oya, &oyb);
        for (int64_t ix = 0; ix < g->w; ++ix) {
            int64_t oxa, oxb;
            covering(ix, g->kw, g->sw, g->pl, g->ow, &oxa, &oxb);
            float *restrict d = g->dx + (row * g->w + ix) * c;
            for (int64_t c0 = 0; c0 < c; c0 += CB) {
                const int64_t cl = c - c0 < CB ? c - c0 : CB;
                for (int64_t ci = 0; ci < cl; ++ci)
                    acc[ci] = 0.0f;
                for (int64_t oy = oyb - 1; oy >= oya; --oy) {
                    const int64_t ch = window_count(oy, g->kh, g->sh, g->pt, g->h);
                    for (int64_t ci = 0; ci < cl; ++ci)
                        part[ci] = 0.0f;
                    for (int64_t ox = oxb - 1; ox >= oxa; --ox) {
                        const float count =
                            (float)(ch * window_count(ox, g->kw, g->sw, g->pl, g->w));
                        const float *restrict gg =
                            g->g + ((img * g->oh + oy) * g->ow + ox) * c + c0;
                        for (int64_t ci = 0; ci < cl; ++ci)
                            part[ci] += gg[ci] / count;
                    }
                    for (int64_t ci = 0; ci < cl; ++ci)
                        acc[ci] += part[ci];
                }
                for (int64_t ci = 0; ci < cl; ++ci)
                    d[c0 + ci] = acc[ci];
            }
        }
    }
}

/* The table's entries: output rows [lo, hi) */
static void FN(max_pool_rows)(const pool_geo *g, int64_t lo, int64_t hi)
{
#ifdef POOL_FAST_MAX
    if (POOL_FAST_MAX(g, lo, hi))
        return;
#endif
    if (g->c == 1)
        FN(max_pool_c1)(g, lo, hi);
    else
        FN(max_pool_channels)(g, lo, hi);
}

static void FN(max_pool_grad_rows)(const pool_geo *g, int64_t lo, int64_t hi)
{
#ifdef POOL_FAST_MAX_GRAD
    if (POOL_FAST_MAX_GRAD(g, lo, hi))
        return;
#endif
    if (g->c == 1)
        FN(max_pool_grad_c1)(g, lo, hi);
    else
        FN(max_pool_grad_channels)(g, lo, hi);
}

const pool_kernel_table MG_ISA_FN(pool_kernels) = {
    .max_pool = FN(max_pool_rows),
    .max_pool_grad = FN(max_pool_grad_rows),
    .max_pool_arg = FN(max_pool_arg),
    .max_pool_grad_in = FN(max_pool_grad_in),
    .max_pool_grad_images = FN(max_pool_grad_images),
    .avg_pool = FN(avg_pool),
    .avg_pool_grad_in = FN(avg_pool_grad_in),
};

#undef FN

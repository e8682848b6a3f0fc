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
                float b = r0[2 * ox];
                b = max_nan(b, r0[2 * ox + 1]);
                b = max_nan(b, r1[2 * ox]);
                out[ox] = max_nan(b, r1[2 * ox + 1]);
            }
            for (; ox < g->ow; ++ox) /* a last window cut by the right edge */
                out[ox] = max_nan(r0[2 * ox], r1[2 * ox]);
            continue;
        }
        for (int64_t ox = 0; ox < g->ow; ++ox) {
            int64_t xa, xb;
            window_cols(g, ox, &xa, &xb);
            float b = -__builtin_inff();
            int first = 1;
            for (int64_t yy = ya; yy < yb; ++yy)
                for (int64_t xx = xa; xx < xb; ++xx) {
                    const float v = plane[yy * w + xx];
                    b = first ? v : max_nan(b, v);
                    first = 0;
                }
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
                dplane[at] = 0.0f + grad[ox];
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
            int first = 1;
            for (int64_t yy = ya; yy < yb; ++yy)
                for (int64_t xx = xa; xx < xb; ++xx) {
                    const float *restrict s = g->x + ((img * g->h + yy) * g->w + xx) * c;
                    if (first) {
                        for (int64_t ci = 0; ci < c; ++ci)
                            o[ci] = s[ci];
                        first = 0;
                    } else {
                        for (int64_t ci = 0; ci < c; ++ci) {
                            const float v = s[ci], b = o[ci];
                            o[ci] = (v > b || v != v) ? v : b;
                        }
                    }
                }
            if (first) /* empty window (not produced by SAME / VALID) */
                for (int64_t ci = 0; ci < c; ++ci)
                    o[ci] = -__builtin_inff();
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
                        float *restrict d = g->dx + ((img * g->h + yy) * g->w + xx) * c + c0;
                        for (int64_t ci = 0; ci < cl; ++ci)
                            d[ci] = arg[ci] == k ? 0.0f + gg[c0 + ci] : 0.0f;
                    }
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
};

#undef FN

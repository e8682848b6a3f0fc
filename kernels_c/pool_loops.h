/* The element loops of pool.c, included once per instruction set with LOOP_ATTR (a target
 * attribute, or nothing) and SUFFIX defined; the compiler vectorizes the channel loops.
 * An NCHW tensor is seen as n * c single-channel NHWC images. */

#define NN_CAT2(a, b) a##_##b
#define NN_CAT(a, b) NN_CAT2(a, b)
#define FN(name) NN_CAT(name, SUFFIX)

/* max pool of output rows [lo, hi) (row = image * out_h + y) */
static LOOP_ATTR void FN(max_pool_rows)(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t c = g->c;
    if (c == 1) {
        FN(pool_c1)(g, lo, hi);
        return;
    }
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
static LOOP_ATTR void FN(max_pool_grad_rows)(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t c = g->c;
    float best[CB];
    int32_t arg[CB];
    if (c == 1) {
        FN(pool_grad_c1)(g, lo, hi);
        return;
    }
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

static LOOP_ATTR void FN(relu_range)(const float *restrict x, float *restrict y, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        y[i] = (x[i] > 0.0f || x[i] != x[i]) ? x[i] : 0.0f; /* as numpy.maximum(x, 0) */
}

static LOOP_ATTR void FN(relu_grad_range)(const float *restrict g, const float *restrict f,
                                          float *restrict dx, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        dx[i] = f[i] > 0.0f ? g[i] : 0.0f;
}

/* no FMA contraction: every operation rounds to float32 as numpy's do (same results) */
static LOOP_ATTR __attribute__((optimize("fp-contract=off"))) void
FN(adam_range)(const float *restrict var, const float *restrict m, const float *restrict v,
               const float *restrict grad, float *restrict var_out, float *restrict m_out,
               float *restrict v_out, float lr_t, float beta1, float beta2, float epsilon,
               int nesterov, int64_t n)
{
    const float omb1 = 1.0f - beta1, omb2 = 1.0f - beta2;
    if (nesterov) {
        for (int64_t i = 0; i < n; ++i) {
            const float gi = grad[i];
            const float mi = m[i] + (gi - m[i]) * omb1;
            const float vi = v[i] + (gi * gi - v[i]) * omb2;
            const float step = mi * beta1 + omb1 * gi;
            var_out[i] = var[i] - lr_t * step / (__builtin_sqrtf(vi) + epsilon);
            m_out[i] = mi;
            v_out[i] = vi;
        }
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        const float gi = grad[i];
        const float mi = m[i] + (gi - m[i]) * omb1;
        const float vi = v[i] + (gi * gi - v[i]) * omb2;
        var_out[i] = var[i] - lr_t * mi / (__builtin_sqrtf(vi) + epsilon);
        m_out[i] = mi;
        v_out[i] = vi;
    }
}

#undef FN
#undef NN_CAT
#undef NN_CAT2

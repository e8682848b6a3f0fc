/* The depthwise loops (see depthwise_internal.h for the layouts), written once and
 * instantiated per ISA by depthwise_isa_<isa>.c. Channels are the vector lanes: every
 * output element is one lane of one accumulator, a chain of fused multiply-adds from +0
 * over its taps (or pixels) in the order depthwise.h states, so all ISAs give the same bits.
 *
 * Needs, from the ISA file: MG_ISA_NAME (defines dw_kernels_<isa>), DW_LANES (floats per
 * vector), DW_TILE (output pixels per forward tile: the independent accumulators that hide
 * the multiply-add latency), the vector type dw_vec and dw_zero(), dw_load(p, lanes),
 * dw_store(p, v, lanes) (lanes <= DW_LANES; the others neither read nor written) and
 * dw_fma(a, b, acc) = a * b + acc rounded once.
 */
#include <string.h>

#define FN(name) MG_ISA_FN(name)
#define UNROLL _Pragma("GCC unroll 16")
#define INLINE static inline __attribute__((always_inline))

enum { DW_BLOCK = 4, DW_REG_K = 3 }; /* input-gradient vectors per block; 3x3 sums in registers */

/* ------------------------------------------------------------------------------------------ */
/* Forward                                                                                     */

/* NP pixels (NP constant: DW_TILE or 1) x one vector of channels: taps ni x nj from x at xq
 * (pixel 0's first tap) and the filter at fq. Steps in floats: tap rows of x (row_step),
 * tap columns (tap_step), pixels (pix_step), filter rows (f_row), channels (c). */
typedef struct {
    int64_t ni, nj, row_step, tap_step, pix_step, f_row, c;
} dw_taps;

INLINE void FN(fwd_block)(const dw_taps *t, const float *xq, const float *fq, float *yq,
                          int lanes, const int NP)
{
    dw_vec acc[DW_TILE];
    UNROLL for (int p = 0; p < NP; ++p) acc[p] = dw_zero();
    for (int64_t i = 0; i < t->ni; ++i)
        for (int64_t j = 0; j < t->nj; ++j) {
            const dw_vec fv = dw_load(fq + i * t->f_row + j * t->c, lanes);
            const float *xt = xq + i * t->row_step + j * t->tap_step;
            UNROLL for (int p = 0; p < NP; ++p)
                acc[p] = dw_fma(dw_load(xt + p * t->pix_step, lanes), fv, acc[p]);
        }
    UNROLL for (int p = 0; p < NP; ++p) dw_store(yq + p * t->c, acc[p], lanes);
}

/* NP pixels, every channel: full vectors, then the masked last one. */
INLINE void FN(fwd_pixels)(const dw_taps *t, const float *xq, const float *fq, float *yq,
                           const int NP)
{
    int64_t c0 = 0;
    for (; c0 + DW_LANES <= t->c; c0 += DW_LANES)
        FN(fwd_block)(t, xq + c0, fq + c0, yq + c0, DW_LANES, NP);
    if (c0 < t->c)
        FN(fwd_block)(t, xq + c0, fq + c0, yq + c0, (int)(t->c - c0), NP);
}

/* Output rows [lo, hi). Columns whose kw taps all lie inside the input go DW_TILE at a time
 * (a tile that would pass the last of them is moved back to end there: it recomputes a few
 * pixels, to the same bits); the others one by one with their own taps. */
static void FN(forward)(const dw_geo *g, const float *x, const float *f, float *y, int64_t lo,
                        int64_t hi)
{
    const int64_t c = g->c, w = g->w;
    int64_t qa, qb;
    dw_span(-g->pl, g->sw, g->ow, w - (g->kw - 1) * g->dw, &qa, &qb);
    for (int64_t row = lo; row < hi; ++row) {
        const int64_t img = row / g->oh, p = row % g->oh;
        float *yr = y + row * g->ow * c;
        int64_t i0, i1;
        dw_span(p * g->sh - g->pt, g->dh, g->kh, g->h, &i0, &i1);
        if (i0 == i1) {
            memset(yr, 0, (size_t)(g->ow * c) * sizeof(float));
            continue;
        }
        /* x at tap row i0, column 0; the filter at tap row i0 */
        const float *xr = x + (img * g->h + p * g->sh - g->pt + i0 * g->dh) * w * c;
        const float *fr = f + i0 * g->kw * c;
        dw_taps t = {i1 - i0, g->kw, g->dh * w * c, g->dw * c, g->sw * c, g->kw * c, c};
        for (int64_t q = 0; q < g->ow;) {
            if (q >= qa && q < qb && qb - qa >= DW_TILE) {
                const int64_t q0 = q + DW_TILE <= qb ? q : qb - DW_TILE;
                FN(fwd_pixels)(&t, xr + (q0 * g->sw - g->pl) * c, fr, yr + q0 * c, DW_TILE);
                q = q0 + DW_TILE;
                continue;
            }
            int64_t j0, j1;
            dw_span(q * g->sw - g->pl, g->dw, g->kw, w, &j0, &j1);
            t.nj = j1 - j0;
            if (j0 == j1)
                memset(yr + q * c, 0, (size_t)c * sizeof(float));
            else
                FN(fwd_pixels)(&t, xr + (q * g->sw - g->pl + j0 * g->dw) * c, fr + j0 * c,
                               yr + q * c, 1);
            t.nj = g->kw;
            ++q;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Input gradient                                                                              */

/* NV vectors of channels (NV constant: DW_BLOCK or 1; the independent chains) of one input
 * pixel: its `count` taps (offsets into dy and f, pairs in `taps`), each over the
 * multiplier. */
INLINE void FN(bwi_block)(const float *dy, const float *f, float *out, const int64_t *taps,
                          int64_t count, int64_t mult, int64_t c, int lanes, const int NV)
{
    dw_vec acc[DW_BLOCK];
    UNROLL for (int v = 0; v < NV; ++v) acc[v] = dw_zero();
    for (int64_t k = 0; k < count; ++k) {
        const float *d = dy + taps[2 * k], *ff = f + taps[2 * k + 1];
        for (int64_t m = 0; m < mult; ++m, d += c, ff += c)
            UNROLL for (int v = 0; v < NV; ++v)
                acc[v] = dw_fma(dw_load(d + v * DW_LANES, lanes),
                                dw_load(ff + v * DW_LANES, lanes), acc[v]);
    }
    UNROLL for (int v = 0; v < NV; ++v) dw_store(out + v * DW_LANES, acc[v], lanes);
}

/* Input rows [lo, hi): per pixel, its taps (i, j) in row-major order whose out_backprop
 * pixel exists (p = (r + pad_top - i * dh) / sh exactly, inside the output; q likewise). */
static void FN(backprop_input)(const dw_geo *g, const float *dy, const float *f, float *dx,
                               int64_t lo, int64_t hi, int64_t *taps)
{
    const int64_t c = g->c, mc = g->mult * c;
    for (int64_t row = lo; row < hi; ++row) {
        const int64_t img = row / g->h, r = row % g->h;
        for (int64_t s = 0; s < g->w; ++s) {
            int64_t count = 0;
            for (int64_t i = 0; i < g->kh; ++i) {
                const int64_t tr = r + g->pt - i * g->dh;
                if (tr < 0)
                    break;
                if (tr % g->sh || tr / g->sh >= g->oh)
                    continue;
                for (int64_t j = 0; j < g->kw; ++j) {
                    const int64_t tc = s + g->pl - j * g->dw;
                    if (tc < 0)
                        break;
                    if (tc % g->sw || tc / g->sw >= g->ow)
                        continue;
                    taps[2 * count] = ((img * g->oh + tr / g->sh) * g->ow + tc / g->sw) * mc;
                    taps[2 * count + 1] = (i * g->kw + j) * mc;
                    ++count;
                }
            }
            float *out = dx + (row * g->w + s) * c;
            int64_t c0 = 0;
            for (; c0 + DW_BLOCK * DW_LANES <= c; c0 += DW_BLOCK * DW_LANES)
                FN(bwi_block)(dy + c0, f + c0, out + c0, taps, count, g->mult, c, DW_LANES,
                              DW_BLOCK);
            for (; c0 + DW_LANES <= c; c0 += DW_LANES)
                FN(bwi_block)(dy + c0, f + c0, out + c0, taps, count, g->mult, c, DW_LANES, 1);
            if (c0 < c)
                FN(bwi_block)(dy + c0, f + c0, out + c0, taps, count, g->mult, c,
                              (int)(c - c0), 1);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Filter gradient                                                                             */

/* One image, one vector of channels: per tap (i, j), the chain over the output pixels
 * (p, q) row-major whose input pixel for that tap exists. KH x KW constant (3 x 3): the
 * sums stay in registers; otherwise (regs == 0, KH, KW the filter's) they live in part. */
INLINE void FN(bwf_sums)(const dw_geo *g, const float *x, const float *dy, float *part,
                         int64_t img, int64_t c0, int lanes, const int64_t KH,
                         const int64_t KW, const int regs)
{
    const int64_t c = g->c, w = g->w;
    dw_vec acc[DW_REG_K * DW_REG_K];
    if (regs) {
        UNROLL for (int t = 0; t < KH * KW; ++t) acc[t] = dw_zero();
    } else {
        for (int64_t t = 0; t < KH * KW; ++t)
            dw_store(part + t * c + c0, dw_zero(), lanes);
    }
    const float *ximg = x + img * g->h * w * c + c0;
    const float *dq = dy + img * g->oh * g->ow * c + c0;
    for (int64_t p = 0; p < g->oh; ++p) {
        int64_t i0, i1;
        dw_span(p * g->sh - g->pt, g->dh, KH, g->h, &i0, &i1);
        for (int64_t q = 0; q < g->ow; ++q, dq += c) {
            int64_t j0, j1;
            dw_span(q * g->sw - g->pl, g->dw, KW, w, &j0, &j1);
            if (i0 == i1 || j0 == j1)
                continue;
            const dw_vec d = dw_load(dq, lanes);
            /* x at tap (i0, j0) of this pixel */
            const float *xq = ximg + ((p * g->sh - g->pt + i0 * g->dh) * w + q * g->sw -
                                      g->pl + j0 * g->dw) * c;
            if (regs) {
                UNROLL for (int64_t i = 0; i < KH; ++i) UNROLL for (int64_t j = 0; j < KW; ++j)
                {
                    if (i < i0 || i >= i1 || j < j0 || j >= j1)
                        continue;
                    const float *xv = xq + ((i - i0) * g->dh * w + (j - j0) * g->dw) * c;
                    acc[i * KW + j] = dw_fma(dw_load(xv, lanes), d, acc[i * KW + j]);
                }
            } else {
                for (int64_t i = i0; i < i1; ++i)
                    for (int64_t j = j0; j < j1; ++j) {
                        const float *xv = xq + ((i - i0) * g->dh * w + (j - j0) * g->dw) * c;
                        float *a = part + (i * KW + j) * c + c0;
                        dw_store(a, dw_fma(dw_load(xv, lanes), d, dw_load(a, lanes)), lanes);
                    }
            }
        }
    }
    if (regs)
        UNROLL for (int t = 0; t < KH * KW; ++t) dw_store(part + t * c + c0, acc[t], lanes);
}

static void FN(backprop_filter)(const dw_geo *g, const float *x, const float *dy, float *part,
                                int64_t img, int64_t c0)
{
    const int full = g->c - c0 >= DW_LANES;
    const int lanes = full ? DW_LANES : (int)(g->c - c0);
    if (g->kh == DW_REG_K && g->kw == DW_REG_K) {
        if (full)
            FN(bwf_sums)(g, x, dy, part, img, c0, DW_LANES, DW_REG_K, DW_REG_K, 1);
        else
            FN(bwf_sums)(g, x, dy, part, img, c0, lanes, DW_REG_K, DW_REG_K, 1);
    } else {
        FN(bwf_sums)(g, x, dy, part, img, c0, lanes, g->kh, g->kw, 0);
    }
}

const dw_kernel_table MG_ISA_FN(dw_kernels) = {
    .lanes = DW_LANES,
    .forward = FN(forward),
    .backprop_input = FN(backprop_input),
    .backprop_filter = FN(backprop_filter),
};

#undef INLINE
#undef UNROLL
#undef FN

/* The depthwise loops (see depthwise_internal.h for the layouts), written once and
 * instantiated per ISA by depthwise_isa_<isa>.c. Channels are the vector lanes: every
 * output element is one lane of one accumulator, a chain of fused multiply-adds from +0
 * over its taps (or pixels) in the order depthwise.h states, so all ISAs give the same bits.
 *
 * Needs, from the ISA file: MG_ISA_NAME (defines dw_kernels_<isa>), DW_LANES (floats per
 * vector), DW_TILE (output pixels per tile of the forward and the input gradient: the
 * independent accumulators that hide the multiply-add latency), the vector type dw_vec and
 * dw_zero(), dw_load(p, lanes),
 * dw_store(p, v, lanes) (lanes <= DW_LANES; the others neither read nor written) and
 * dw_fma(a, b, acc) = a * b + acc rounded once.
 */
#include <string.h>

#define FN(name) MG_ISA_FN(name)
#define UNROLL _Pragma("GCC unroll 16")
#define INLINE static inline __attribute__((always_inline))

/* filter-gradient sums in registers: 3x3 filters, and 5x5 where the ISA has 32 vector
 * registers (AVX-512: 25 sums, the gradient and the input vector) */
enum { DW_REG_K = 3, DW_REG_K5 = 5 };

/* ------------------------------------------------------------------------------------------ */
/* The tile engine of the forward and the input gradient                                      */

/* NP output pixels (NP constant: DW_TILE or 1, the independent chains) x one vector of
 * channels: each the chain over ni x nj taps (rows, then columns), each over nm multiplier
 * steps, of source * filter. Steps in floats, from the source at pixel 0's first tap and the
 * filter at that tap: per tap row (row_step, f_row), per tap column (tap_step, f_tap), per
 * multiplier step (m_step, both), per pixel (pix_step in the source, out_step in the
 * output); the source steps may be negative (the input gradient walks dy backwards). */
typedef struct {
    int64_t ni, nj, row_step, tap_step, f_row, f_tap, m_step, pix_step, out_step, c;
} dw_taps;

INLINE void FN(tile_block)(const dw_taps *t, const float *src, const float *fq, float *out,
                           int64_t nm, int lanes, const int NP)
{
    dw_vec acc[DW_TILE];
    UNROLL for (int p = 0; p < NP; ++p) acc[p] = dw_zero();
    for (int64_t i = 0; i < t->ni; ++i)
        for (int64_t j = 0; j < t->nj; ++j)
            for (int64_t m = 0; m < nm; ++m) {
                const int64_t at = i * t->row_step + j * t->tap_step + m * t->m_step;
                const dw_vec fv = dw_load(fq + i * t->f_row + j * t->f_tap + m * t->m_step,
                                          lanes);
                UNROLL for (int p = 0; p < NP; ++p)
                    acc[p] = dw_fma(dw_load(src + at + p * t->pix_step, lanes), fv, acc[p]);
            }
    UNROLL for (int p = 0; p < NP; ++p) dw_store(out + p * t->out_step, acc[p], lanes);
}

/* One output pixel x DW_TILE full vectors of channels: the single-pixel tiles' independent
 * chains come from the channels instead (a pixel near the border, or a row too narrow for
 * a pixel tile, as a 5x5 map's: one chain would wait on each multiply-add's latency). Each
 * lane's chain is tile_block's, tap for tap: the same bits. */
INLINE void FN(tile_channels)(const dw_taps *t, const float *src, const float *fq, float *out,
                              int64_t nm)
{
    dw_vec acc[DW_TILE];
    UNROLL for (int v = 0; v < DW_TILE; ++v) acc[v] = dw_zero();
    for (int64_t i = 0; i < t->ni; ++i)
        for (int64_t j = 0; j < t->nj; ++j)
            for (int64_t m = 0; m < nm; ++m) {
                const int64_t at = i * t->row_step + j * t->tap_step + m * t->m_step;
                const int64_t ft = i * t->f_row + j * t->f_tap + m * t->m_step;
                UNROLL for (int v = 0; v < DW_TILE; ++v)
                    acc[v] = dw_fma(dw_load(src + at + v * DW_LANES, DW_LANES),
                                    dw_load(fq + ft + v * DW_LANES, DW_LANES), acc[v]);
            }
    UNROLL for (int v = 0; v < DW_TILE; ++v) dw_store(out + v * DW_LANES, acc[v], DW_LANES);
}

/* NP pixels, every channel: full vectors (one pixel: DW_TILE of them at a time first), then
 * the masked last one. */
INLINE void FN(tile)(const dw_taps *t, const float *src, const float *fq, float *out,
                     int64_t nm, const int NP)
{
    int64_t c0 = 0;
    if (NP == 1)
        for (; c0 + DW_TILE * DW_LANES <= t->c; c0 += DW_TILE * DW_LANES)
            FN(tile_channels)(t, src + c0, fq + c0, out + c0, nm);
    for (; c0 + DW_LANES <= t->c; c0 += DW_LANES)
        FN(tile_block)(t, src + c0, fq + c0, out + c0, nm, DW_LANES, NP);
    if (c0 < t->c)
        FN(tile_block)(t, src + c0, fq + c0, out + c0, nm, (int)(t->c - c0), NP);
}

/* ------------------------------------------------------------------------------------------ */
/* Forward                                                                                     */

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
        dw_taps t = {i1 - i0, g->kw, g->dh * w * c, g->dw * c, g->kw * c, c, 0, g->sw * c, c, c};
        for (int64_t q = 0; q < g->ow;) {
            if (q >= qa && q < qb && qb - qa >= DW_TILE) {
                const int64_t q0 = q + DW_TILE <= qb ? q : qb - DW_TILE;
                FN(tile)(&t, xr + (q0 * g->sw - g->pl) * c, fr, yr + q0 * c, 1, DW_TILE);
                q = q0 + DW_TILE;
                continue;
            }
            int64_t j0, j1;
            dw_span(q * g->sw - g->pl, g->dw, g->kw, w, &j0, &j1);
            t.nj = j1 - j0;
            if (j0 == j1)
                memset(yr + q * c, 0, (size_t)c * sizeof(float));
            else
                FN(tile)(&t, xr + (q * g->sw - g->pl + j0 * g->dw) * c, fr + j0 * c, yr + q * c,
                         1, 1);
            t.nj = g->kw;
            ++q;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Input gradient                                                                              */

/* Input row r (or column) gets out_backprop row p = (r + pad - i * dilation) / stride from
 * tap i when that divides exactly and 0 <= p < count: the taps in [0, k) that do form an
 * arithmetic progression *first + n * *step (n < the count returned). */
static inline int64_t FN(back_taps)(int64_t start, int64_t dilation, int64_t stride, int64_t k,
                                    int64_t count, int64_t *first, int64_t *step)
{
    int64_t n = 0;
    *first = 0, *step = 1;
    for (int64_t i = 0; i < k && start - i * dilation >= 0; ++i) {
        const int64_t v = start - i * dilation;
        if (v % stride || v / stride >= count)
            continue;
        if (n == 0)
            *first = i;
        else if (n == 1)
            *step = i - *first;
        ++n;
    }
    return n;
}

/* Input rows [lo, hi): per pixel, the chain over its taps (i, j) row-major whose
 * out_backprop pixel exists, each over the multiplier. A row's pixels go by columns of one
 * residue modulo the stride (which share their taps' pattern), DW_TILE at a time where the
 * first and last pixel of the tile have the same taps (so do those between), else one by
 * one. dy and f have the multiplier before the channel (depthwise_internal.h). */
static void FN(backprop_input)(const dw_geo *g, const float *dy, const float *f, float *dx,
                               int64_t lo, int64_t hi)
{
    const int64_t c = g->c, mc = g->mult * c, w = g->w;
    for (int64_t row = lo; row < hi; ++row) {
        const int64_t img = row / g->h, r = row % g->h;
        float *dxr = dx + row * w * c;
        int64_t i0, di;
        const int64_t ni = FN(back_taps)(r + g->pt, g->dh, g->sh, g->kh, g->oh, &i0, &di);
        if (ni == 0) {
            memset(dxr, 0, (size_t)(w * c) * sizeof(float));
            continue;
        }
        /* dy at row p of tap i0; consecutive taps i step di rows of the filter and
           di * dh / sh rows of dy back */
        const float *dyr = dy + (img * g->oh + (r + g->pt - i0 * g->dh) / g->sh) * g->ow * mc;
        dw_taps t = {ni, 0, -(di * g->dh / g->sh) * g->ow * mc, 0, di * g->kw * mc, 0, c, mc,
                     g->sw * c, c};
        for (int64_t rho = 0; rho < g->sw && rho < w; ++rho)
            for (int64_t s = rho; s < w;) {
                int64_t j0, dj, j0_last, dj_last;
                const int64_t nj = FN(back_taps)(s + g->pl, g->dw, g->sw, g->kw, g->ow, &j0, &dj);
                const int64_t last = s + (DW_TILE - 1) * g->sw;
                const int tile = nj && last < w &&
                                 FN(back_taps)(last + g->pl, g->dw, g->sw, g->kw, g->ow,
                                               &j0_last, &dj_last) == nj && j0_last == j0;
                if (nj == 0) {
                    memset(dxr + s * c, 0, (size_t)c * sizeof(float));
                    s += g->sw;
                    continue;
                }
                t.nj = nj;
                t.tap_step = -(dj * g->dw / g->sw) * mc;
                t.f_tap = dj * mc;
                const float *src = dyr + (s + g->pl - j0 * g->dw) / g->sw * mc;
                const float *fq = f + (i0 * g->kw + j0) * mc;
                if (tile)
                    FN(tile)(&t, src, fq, dxr + s * c, g->mult, DW_TILE);
                else
                    FN(tile)(&t, src, fq, dxr + s * c, g->mult, 1);
                s += tile ? DW_TILE * g->sw : g->sw;
            }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Filter gradient                                                                             */

/* The output columns [*qa, *qb) whose window columns all lie inside the input (every tap
 * column j reads x column q * sw - pl + j * dw in [0, w)); empty when none. */
INLINE void FN(interior_columns)(const dw_geo *g, const int64_t KW, int64_t *qa, int64_t *qb)
{
    const int64_t last = g->w - 1 + g->pl - (KW - 1) * g->dw; /* q * sw <= last */
    *qa = (g->pl + g->sw - 1) / g->sw;
    *qb = last < 0 ? 0 : last / g->sw + 1;
    if (*qb > g->ow)
        *qb = g->ow;
    if (*qb < *qa)
        *qb = *qa;
}

/* One image, one vector of channels: per tap (i, j), the chain over the output pixels
 * (p, q) row-major whose input pixel for that tap exists. KH x KW constant (3 x 3, or 5 x 5
 * with DW_LANES >= 16): the sums stay in registers, and the pixels whose whole window is inside the input (the rows
 * with every tap row, the columns of interior_columns) run without per-tap checks, in the
 * same order; otherwise (regs == 0, KH, KW the filter's) they live in part. */
INLINE void FN(bwf_sums)(const dw_geo *g, const float *x, const float *dy, float *part,
                         int64_t img, int64_t c0, int lanes, const int64_t KH,
                         const int64_t KW, const int regs)
{
    const int64_t c = g->c, w = g->w;
    dw_vec acc[DW_REG_K5 * DW_REG_K5];
    if (regs) {
        UNROLL for (int t = 0; t < KH * KW; ++t) acc[t] = dw_zero();
    } else {
        for (int64_t t = 0; t < KH * KW; ++t)
            dw_store(part + t * c + c0, dw_zero(), lanes);
    }
    int64_t qa = 0, qb = 0;
    if (regs)
        FN(interior_columns)(g, KW, &qa, &qb);
    const float *ximg = x + img * g->h * w * c + c0;
    const float *dq = dy + img * g->oh * g->ow * c + c0;
    for (int64_t p = 0; p < g->oh; ++p) {
        int64_t i0, i1;
        dw_span(p * g->sh - g->pt, g->dh, KH, g->h, &i0, &i1);
        const int full_rows = regs && i0 == 0 && i1 == KH;
        for (int64_t q = 0; q < g->ow;) {
            if (full_rows && q == qa && qa < qb) {
                /* x at tap (0, 0) of pixel (p, q) */
                const float *xq = ximg + ((p * g->sh - g->pt) * w + q * g->sw - g->pl) * c;
                for (; q < qb; ++q, dq += c, xq += g->sw * c) {
                    const dw_vec d = dw_load(dq, lanes);
                    UNROLL for (int64_t i = 0; i < KH; ++i) UNROLL for (int64_t j = 0; j < KW;
                                                                          ++j)
                        acc[i * KW + j] = dw_fma(
                            dw_load(xq + (i * g->dh * w + j * g->dw) * c, lanes), d,
                            acc[i * KW + j]);
                }
                continue;
            }
            const int64_t at = q++; /* this pixel's column */
            const float *dp = dq;
            dq += c;
            int64_t j0, j1;
            dw_span(at * g->sw - g->pl, g->dw, KW, w, &j0, &j1);
            if (i0 == i1 || j0 == j1)
                continue;
            const dw_vec d = dw_load(dp, lanes);
            /* x at tap (i0, j0) of this pixel */
            const float *xq = ximg + ((p * g->sh - g->pt + i0 * g->dh) * w + at * g->sw -
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
#if DW_LANES >= 16
    } else if (g->kh == DW_REG_K5 && g->kw == DW_REG_K5) {
        if (full)
            FN(bwf_sums)(g, x, dy, part, img, c0, DW_LANES, DW_REG_K5, DW_REG_K5, 1);
        else
            FN(bwf_sums)(g, x, dy, part, img, c0, lanes, DW_REG_K5, DW_REG_K5, 1);
#endif
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

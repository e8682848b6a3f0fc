/* The convolution micro-kernels (see convolution_internal.h for the tiles), written once
 * with GCC vector extensions and instantiated per ISA: convolution_isa_scalar.c (baseline:
 * 4-float vectors, 3 pixels or rows per tile) and convolution_isa_avx2.c (AVX2 + FMA:
 * 8-float vectors, 6 per tile); AVX-512 has hand-written ones (convolution_isa_avx512.c).
 * A tile's channels are done 16 at a time (16 / VW vectors), so TP (or TR) x 16 / VW
 * accumulators stay in registers.
 *
 * Needs: MG_ISA_NAME (the ISA's name token: defines conv_kernels_<isa>), VW (floats per
 * vector), TP (pixels per forward tile), TR (rows per filter-gradient tile). */

#define FN(name) MG_ISA_FN(name)

typedef float vecf __attribute__((vector_size(VW * 4), aligned(4)));
#define NCH (16 / VW)
#define UNROLL_ALL _Pragma("GCC unroll 16")

static inline vecf FN(vload)(const float *p) { return *(const vecf *)p; }
static inline void FN(vstore)(float *p, vecf v) { *(vecf *)p = v; }

/* 16 channels starting at p, `lanes` of them valid (the others read as 0) */
static inline void FN(load16)(const float *p, int lanes, vecf v[NCH])
{
    if (lanes == 16) {
        UNROLL_ALL for (int j = 0; j < NCH; ++j) v[j] = FN(vload)(p + j * VW);
        return;
    }
    float tmp[16] = {0};
    memcpy(tmp, p, (size_t)lanes * sizeof(float));
    UNROLL_ALL for (int j = 0; j < NCH; ++j) v[j] = FN(vload)(tmp + j * VW);
}

static inline void FN(store16)(float *p, int lanes, const vecf v[NCH])
{
    if (lanes == 16) {
        UNROLL_ALL for (int j = 0; j < NCH; ++j) FN(vstore)(p + j * VW, v[j]);
        return;
    }
    float tmp[16];
    UNROLL_ALL for (int j = 0; j < NCH; ++j) FN(vstore)(tmp + j * VW, v[j]);
    memcpy(p, tmp, (size_t)lanes * sizeof(float));
}

#include "mg_affine.h"
typedef int veci __attribute__((vector_size(VW * 4), aligned(4)));

/* The epilogue's stages (activations.h) on one pixel's 16 channels from ch (res: its
 * residual or NULL), rounded and chosen as the activations' scalar formulas: an add, the
 * affine stage (MG_AFFINE, lane by lane), an add, then relu / relu6 as masks. */
static void FN(epilogue16)(const mg_epilogue *e, int64_t ch, int lanes, const float *res,
                           vecf v[NCH])
{
    vecf a[NCH];
    if (e->bias) {
        FN(load16)(e->bias + ch, lanes, a);
        UNROLL_ALL for (int j = 0; j < NCH; ++j) v[j] += a[j];
    }
    if (e->mean) {
        vecf m[NCH], k[NCH];
        FN(load16)(e->mean + ch, lanes, m);
        FN(load16)(e->k + ch, lanes, k);
        FN(load16)(e->offset + ch, lanes, a);
        UNROLL_ALL for (int j = 0; j < NCH; ++j) for (int l = 0; l < VW; ++l)
            v[j][l] = MG_AFFINE(v[j][l] - m[j][l], k[j][l], a[j][l]);
    }
    if (res) {
        FN(load16)(res, lanes, a);
        UNROLL_ALL for (int j = 0; j < NCH; ++j) v[j] += a[j];
    }
    const vecf zero = {0}, six = zero + 6.0f;
    UNROLL_ALL for (int j = 0; j < NCH; ++j)
    {
        const veci x = (veci)v[j], nan = v[j] != v[j], positive = v[j] > zero;
        const veci below6 = v[j] < six;
        if (e->activation == 1) /* x > 0 or NaN: x, else +0 */
            v[j] = (vecf)(x & (positive | nan));
        else if (e->activation == 2) /* x > 0: x < 6 ? x : 6; NaN: x; else +0 */
            v[j] = (vecf)((positive & ((below6 & x) | (~below6 & (veci)six))) | (nan & x));
    }
}

static void FN(fwd)(const nn_fwd_tile *t)
{
    const int64_t K = t->K, cop = t->cop, rs = t->row_stride;
    for (int v0 = 0; v0 < t->nvec; ++v0) {
        vecf acc[TP][NCH];
        UNROLL_ALL for (int p = 0; p < TP; ++p) UNROLL_ALL for (int j = 0; j < NCH; ++j)
            acc[p][j] = (vecf){0};
        const float *f = t->f + 16 * v0;
        for (int64_t i = 0; i < t->kh; ++i, f += t->frs) {
            const float *xr[TP];
            UNROLL_ALL for (int p = 0; p < TP; ++p) xr[p] = t->x + t->off[p] + i * rs;
            for (int64_t k = 0; k < K; ++k) {
                vecf fv[NCH];
                UNROLL_ALL for (int j = 0; j < NCH; ++j) fv[j] = FN(vload)(f + k * cop + j * VW);
                UNROLL_ALL for (int p = 0; p < TP; ++p)
                {
                    const float xv = xr[p][k];
                    UNROLL_ALL for (int j = 0; j < NCH; ++j) acc[p][j] += xv * fv[j];
                }
            }
        }
        const int lanes = v0 == t->nvec - 1 ? t->last_lanes : 16;
        for (int p = 0; p < t->npix; ++p) {
            if (t->ep)
                FN(epilogue16)(t->ep, t->ch0 + 16 * v0, lanes,
                               t->res ? t->res + t->yoff[p] + 16 * v0 : NULL, acc[p]);
            FN(store16)(t->y + t->yoff[p] + 16 * v0, lanes, acc[p]);
        }
    }
}

/* acc[r] += x[pixel + r] * dy[pixel] over the tile's pixels; `full`: 16 valid lanes
 * (a constant after inlining, so the loop has no tail test and the sums stay in registers) */
static inline __attribute__((always_inline)) void
FN(bwf_sum)(const nn_bwf_tile *t, int v0, int lanes, const int full, vecf acc[TR][NCH])
{
    const int64_t c = t->c, ds = t->dy_stride;
    for (int64_t n = 0; n < t->nimg; ++n)
        for (int64_t y = 0; y < t->ny; ++y) {
            const float *xq = t->x + n * t->img_stride + y * t->row_stride;
            const float *dq = t->dy + n * t->dy_img_stride + y * t->dy_row_stride + 16 * v0;
            for (int64_t x = 0; x < t->nx; ++x, xq += c, dq += ds) {
                vecf d[NCH];
                if (full) {
                    UNROLL_ALL for (int j = 0; j < NCH; ++j) d[j] = FN(vload)(dq + j * VW);
                } else {
                    FN(load16)(dq, lanes, d);
                }
                UNROLL_ALL for (int r = 0; r < TR; ++r)
                {
                    const float xv = xq[r];
                    UNROLL_ALL for (int j = 0; j < NCH; ++j) acc[r][j] += xv * d[j];
                }
            }
        }
}

static void FN(bwf)(const nn_bwf_tile *t)
{
    for (int v0 = 0; v0 < t->nvec; ++v0) {
        const int lanes = v0 == t->nvec - 1 ? t->last_lanes : 16;
        vecf acc[TR][NCH];
        UNROLL_ALL for (int r = 0; r < TR; ++r)
        {
            if (t->accumulate)
                FN(load16)(t->df + (r < t->nrows ? r : t->nrows - 1) * t->df_stride + 16 * v0,
                           lanes, acc[r]);
            else
                UNROLL_ALL for (int j = 0; j < NCH; ++j) acc[r][j] = (vecf){0};
        }
        if (lanes == 16)
            FN(bwf_sum)(t, v0, lanes, 1, acc);
        else
            FN(bwf_sum)(t, v0, lanes, 0, acc);
        for (int r = 0; r < t->nrows; ++r)
            FN(store16)(t->df + r * t->df_stride + 16 * v0, lanes, acc[r]);
    }
}

static void FN(transpose)(const float *const *src, int nsrc, int lanes, float *const *dst)
{
    for (int j = 0; j < lanes; ++j)
        for (int r = 0; r < nsrc; ++r)
            dst[j][r] = src[r][j];
}

const conv_kernel_table MG_ISA_FN(conv_kernels) = {
    .fwd_pixels = {0, TP, TP, TP, TP},
    .fwd = {0, FN(fwd), FN(fwd), FN(fwd), FN(fwd)},
    .bwf_rows = {0, TR, TR, TR, TR},
    .bwf = {[1][TR] = FN(bwf), [2][TR] = FN(bwf), [3][TR] = FN(bwf), [4][TR] = FN(bwf)},
    .transpose = FN(transpose),
};

#undef NCH
#undef UNROLL_ALL
#undef FN

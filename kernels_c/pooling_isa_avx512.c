/* AVX-512 pooling: pooling_template.h's loops compiled for AVX-512, and before them, in
 * registers, the common 2x2 windows with stride 2 and no top/left padding (POOL_FAST_MAX,
 * POOL_FAST_MAX_GRAD): single-channel images (NCHW) 16 windows at a time, several channels
 * (NHWC) 16 channels at a time. Compiled for these extensions and used only when the
 * runtime's ISA is AVX-512 (mg_isa_pick in pooling.c). */
#include "pooling_internal.h"

#if MG_X86
#include <immintrin.h>

MG_TARGET_AVX512_BEGIN

/* Single-channel images, 2x2 windows with stride 2 and no top/left padding (the common NCHW
 * pool): 16 windows of an output row per vector; the two input rows are loaded as 32
 * columns and split into even and odd columns. A last odd column (SAME) or a last input row
 * (odd h, SAME) that is missing is left out of its windows. */
static inline __mmask16 mask_n(int64_t n)
{
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1u);
}

typedef struct {
    __m512 even, odd;
} pair;

static inline pair load_pair(const float *row, int64_t ncols)
{
    const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const __m512 lo = _mm512_maskz_loadu_ps(mask_n(ncols), row);
    const __m512 hi = ncols > 16 ? _mm512_maskz_loadu_ps(mask_n(ncols - 16), row + 16)
                                 : _mm512_setzero_ps();
    return (pair){_mm512_permutex2var_ps(lo, ie, hi), _mm512_permutex2var_ps(lo, io, hi)};
}

static inline void store_pair(float *row, int64_t ncols, __m512 even, __m512 odd)
{
    const __m512i il = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i ih = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    _mm512_mask_storeu_ps(row, mask_n(ncols), _mm512_permutex2var_ps(even, il, odd));
    if (ncols > 16) /* (a store with an empty mask still takes the cache line) */
        _mm512_mask_storeu_ps(row + 16, mask_n(ncols - 16), _mm512_permutex2var_ps(even, ih, odd));
}

static inline int pool_2x2(const pool_geo *g)
{
    return g->kh == 2 && g->kw == 2 && g->sh == 2 && g->sw == 2 && g->pt == 0 && g->pl == 0;
}

/* best = v where v > best or v is NaN, in the lanes of `valid` (max_nan, 16 at a time) */
static inline __m512 max_nan16(__m512 best, __m512 v, __mmask16 valid)
{
    const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
                           _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(best, take & valid, v);
}

/* relu_gate 16 at a time: gv, or with g->relu gv where x > 0 and gv * 0 elsewhere */
static inline __m512 relu_gate16(const pool_geo *g, __m512 gv, __m512 x)
{
    if (!g->relu)
        return gv;
    const __m512 zero = _mm512_setzero_ps();
    return _mm512_mask_mov_ps(_mm512_mul_ps(gv, zero), _mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ),
                              gv);
}

/* Whole tensors of short rows (h = 2 out_h, w = 2 out_w, out_w dividing 16): the input is
 * [rows][2][w] and the output [rows][out_w], so 16 outputs (16 / out_w output rows) come
 * from 64 consecutive input floats. Per block: 4 loads; the 4 window offsets (row-major)
 * picked out with two-source permutes; for the gradient, put back the same way. */
typedef struct {
    __m512i pick[4];      /* input element (0..63) of each output lane, per window offset */
    __mmask16 high[4];    /* lanes whose element is in the upper 32 */
    __m512i put[4];       /* per dx vector: lane + 16 * column parity of each element */
    __mmask16 bottom[4];  /* per dx vector: elements in the window's second row */
} flat_plan;

static int flat_ok(const pool_geo *g)
{
    return pool_2x2(g) && g->h == 2 * g->oh && g->w == 2 * g->ow && g->ow >= 1 &&
           g->ow <= 16 && 16 % g->ow == 0;
}

static void flat_setup(const pool_geo *g, flat_plan *p)
{
    const int ow = (int)g->ow;
    int32_t idx[16];
    for (int s = 0; s < 4; ++s) {
        const int r = s / 2, c = s % 2;
        p->high[s] = 0;
        for (int l = 0; l < 16; ++l) {
            const int e = (l / ow) * 4 * ow + r * 2 * ow + 2 * (l % ow) + c;
            idx[l] = e & 31;
            p->high[s] |= (__mmask16)((e >= 32) << l);
        }
        p->pick[s] = _mm512_loadu_si512(idx);
    }
    for (int m = 0; m < 4; ++m) {
        p->bottom[m] = 0;
        for (int j = 0; j < 16; ++j) {
            const int e = 16 * m + j, q = e / (4 * ow), rem = e % (4 * ow);
            const int r = rem / (2 * ow), col = rem % (2 * ow);
            idx[j] = q * ow + col / 2 + 16 * (col % 2);
            p->bottom[m] |= (__mmask16)(r << j);
        }
        p->put[m] = _mm512_loadu_si512(idx);
    }
}

static inline void flat_load(const flat_plan *p, const float *x, __m512 v[4])
{
    const __m512 z0 = _mm512_loadu_ps(x), z1 = _mm512_loadu_ps(x + 16);
    const __m512 z2 = _mm512_loadu_ps(x + 32), z3 = _mm512_loadu_ps(x + 48);
    for (int s = 0; s < 4; ++s)
        v[s] = _mm512_mask_blend_ps(p->high[s], _mm512_permutex2var_ps(z0, p->pick[s], z1),
                                    _mm512_permutex2var_ps(z2, p->pick[s], z3));
}

/* output rows [lo, hi): whole 16-output blocks, the rest row by row */
static void max_pool_rows_c1_avx512(const pool_geo *g, int64_t lo, int64_t hi);

static void max_pool_flat(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t per = 16 / g->ow; /* output rows per block */
    const int64_t b0 = (lo + per - 1) / per, b1 = hi / per;
    if (b0 >= b1) {
        max_pool_rows_c1_avx512(g, lo, hi);
        return;
    }
    flat_plan p;
    flat_setup(g, &p);
    for (int64_t b = b0; b < b1; ++b) {
        __m512 v[4];
        flat_load(&p, g->x + b * 64, v);
        __m512 best = max_nan16(v[0], v[1], 0xffff);
        best = max_nan16(best, v[2], 0xffff);
        _mm512_storeu_ps(g->y + b * 16, max_nan16(best, v[3], 0xffff));
    }
    if (lo < b0 * per)
        max_pool_rows_c1_avx512(g, lo, b0 * per);
    if (b1 * per < hi)
        max_pool_rows_c1_avx512(g, b1 * per, hi);
}

static void max_pool_grad_rows_c1_avx512(const pool_geo *g, int64_t lo, int64_t hi);

static void max_pool_grad_flat(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t per = 16 / g->ow;
    const int64_t b0 = (lo + per - 1) / per, b1 = hi / per;
    if (b0 >= b1) {
        max_pool_grad_rows_c1_avx512(g, lo, hi);
        return;
    }
    flat_plan p;
    flat_setup(g, &p);
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t b = b0; b < b1; ++b) {
        __m512 v[4];
        flat_load(&p, g->x + b * 64, v);
        const __mmask16 k1 = _mm512_cmp_ps_mask(v[1], v[0], _CMP_GT_OQ);
        __m512 best = _mm512_mask_mov_ps(v[0], k1, v[1]);
        const __mmask16 k2 = _mm512_cmp_ps_mask(v[2], best, _CMP_GT_OQ);
        best = _mm512_mask_mov_ps(best, k2, v[2]);
        const __mmask16 k3 = _mm512_cmp_ps_mask(v[3], best, _CMP_GT_OQ);
        const __mmask16 win[4] = {(__mmask16)~(k1 | k2 | k3), (__mmask16)(k1 & ~(k2 | k3)),
                                  (__mmask16)(k2 & ~k3), k3};
        const __m512 gv = _mm512_add_ps(zero, _mm512_loadu_ps(g->g + b * 16));
        __m512 d[4];
        for (int s = 0; s < 4; ++s)
            d[s] = _mm512_maskz_mov_ps(win[s], relu_gate16(g, gv, v[s]));
        for (int m = 0; m < 4; ++m)
            _mm512_storeu_ps(g->dx + b * 64 + 16 * m,
                             _mm512_mask_blend_ps(p.bottom[m],
                                                  _mm512_permutex2var_ps(d[0], p.put[m], d[1]),
                                                  _mm512_permutex2var_ps(d[2], p.put[m], d[3])));
    }
    if (lo < b0 * per)
        max_pool_grad_rows_c1_avx512(g, lo, b0 * per);
    if (b1 * per < hi)
        max_pool_grad_rows_c1_avx512(g, b1 * per, hi);
}

static void max_pool_rows_c1_avx512(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t h = g->h, w = g->w;
    int64_t img = lo / g->oh, oy = lo % g->oh;
    for (int64_t row = lo; row < hi; ++row, ++oy) {
        if (oy == g->oh)
            oy = 0, ++img;
        const float *r0 = g->x + (img * h + 2 * oy) * w;
        const int bottom = 2 * oy + 1 < h;
        float *out = g->y + row * g->ow;
        for (int64_t ox = 0; ox < g->ow; ox += 16) {
            const int64_t ncols = w - 2 * ox;
            const __mmask16 odd_ok = mask_n((ncols) / 2);
            const pair t = load_pair(r0 + 2 * ox, ncols);
            __m512 b = max_nan16(t.even, t.odd, odd_ok);
            if (bottom) {
                const pair u = load_pair(r0 + w + 2 * ox, ncols);
                b = max_nan16(b, u.even, 0xffff);
                b = max_nan16(b, u.odd, odd_ok);
            }
            _mm512_mask_storeu_ps(out + ox, mask_n(g->ow - ox), b);
        }
    }
}

static void max_pool_grad_rows_c1_avx512(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t h = g->h, w = g->w;
    const __m512 zero = _mm512_setzero_ps();
    int64_t img = lo / g->oh, oy = lo % g->oh;
    for (int64_t row = lo; row < hi; ++row, ++oy) {
        if (oy == g->oh)
            oy = 0, ++img;
        const int64_t off = (img * h + 2 * oy) * w;
        const int bottom = 2 * oy + 1 < h;
        const float *grad = g->g + row * g->ow;
        for (int64_t ox = 0; ox < g->ow; ox += 16) {
            const int64_t ncols = w - 2 * ox;
            const __mmask16 odd_ok = mask_n(ncols / 2);
            const pair t = load_pair(g->x + off + 2 * ox, ncols);
            __m512 best = t.even;
            __mmask16 k1 = _mm512_cmp_ps_mask(t.odd, best, _CMP_GT_OQ) & odd_ok, k2 = 0, k3 = 0;
            best = _mm512_mask_mov_ps(best, k1, t.odd);
            pair u = {zero, zero};
            if (bottom) {
                u = load_pair(g->x + off + w + 2 * ox, ncols);
                k2 = _mm512_cmp_ps_mask(u.even, best, _CMP_GT_OQ);
                best = _mm512_mask_mov_ps(best, k2, u.even);
                k3 = _mm512_cmp_ps_mask(u.odd, best, _CMP_GT_OQ) & odd_ok;
            }
            /* the winner: the last offset that replaced the maximum */
            const __mmask16 w3 = k3, w2 = k2 & ~w3, w1 = k1 & ~(k2 | k3);
            const __mmask16 w0 = ~(k1 | k2 | k3);
            const __m512 gv = _mm512_add_ps(zero, _mm512_maskz_loadu_ps(mask_n(g->ow - ox),
                                                                        grad + ox));
            store_pair(g->dx + off + 2 * ox, ncols,
                       _mm512_maskz_mov_ps(w0, relu_gate16(g, gv, t.even)),
                       _mm512_maskz_mov_ps(w1, relu_gate16(g, gv, t.odd)));
            if (bottom)
                store_pair(g->dx + off + w + 2 * ox, ncols,
                           _mm512_maskz_mov_ps(w2, relu_gate16(g, gv, u.even)),
                           _mm512_maskz_mov_ps(w3, relu_gate16(g, gv, u.odd)));
        }
    }
}

/* NHWC (several channels), 2x2 windows with stride 2 and no top/left padding: per window,
 * 16 channels at a time; a window cut by the bottom or right edge (SAME) has fewer
 * offsets. */
static void pool_nhwc_2x2(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t h = g->h, w = g->w, c = g->c;
    int64_t img = lo / g->oh, oy = lo % g->oh;
    for (int64_t row = lo; row < hi; ++row, ++oy) {
        if (oy == g->oh)
            oy = 0, ++img;
        const float *r0 = g->x + (img * h + 2 * oy) * w * c;
        const int bottom = 2 * oy + 1 < h;
        for (int64_t ox = 0; ox < g->ow; ++ox) {
            const float *p0 = r0 + 2 * ox * c, *p1 = p0 + w * c;
            const int right = 2 * ox + 1 < w;
            float *out = g->y + (row * g->ow + ox) * c;
            for (int64_t c0 = 0; c0 < c; c0 += 16) {
                const __mmask16 m = mask_n(c - c0);
                __m512 b = _mm512_maskz_loadu_ps(m, p0 + c0);
                if (right)
                    b = max_nan16(b, _mm512_maskz_loadu_ps(m, p0 + c + c0), 0xffff);
                if (bottom) {
                    b = max_nan16(b, _mm512_maskz_loadu_ps(m, p1 + c0), 0xffff);
                    if (right)
                        b = max_nan16(b, _mm512_maskz_loadu_ps(m, p1 + c + c0), 0xffff);
                }
                _mm512_mask_storeu_ps(out + c0, m, b);
            }
        }
    }
}

static void pool_grad_nhwc_2x2(const pool_geo *g, int64_t lo, int64_t hi)
{
    const int64_t h = g->h, w = g->w, c = g->c;
    const __m512 zero = _mm512_setzero_ps();
    int64_t img = lo / g->oh, oy = lo % g->oh;
    for (int64_t row = lo; row < hi; ++row, ++oy) {
        if (oy == g->oh)
            oy = 0, ++img;
        const int64_t off = (img * h + 2 * oy) * w * c;
        const int bottom = 2 * oy + 1 < h;
        for (int64_t ox = 0; ox < g->ow; ++ox) {
            const int64_t o0 = off + 2 * ox * c, o1 = o0 + w * c;
            const int right = 2 * ox + 1 < w;
            const float *grad = g->g + (row * g->ow + ox) * c;
            for (int64_t c0 = 0; c0 < c; c0 += 16) {
                const __mmask16 m = mask_n(c - c0);
                const __m512 v0 = _mm512_maskz_loadu_ps(m, g->x + o0 + c0);
                __m512 best = v0, v1 = zero, v2 = zero, v3 = zero;
                __mmask16 k1 = 0, k2 = 0, k3 = 0;
                if (right) {
                    v1 = _mm512_maskz_loadu_ps(m, g->x + o0 + c + c0);
                    k1 = _mm512_cmp_ps_mask(v1, best, _CMP_GT_OQ);
                    best = _mm512_mask_mov_ps(best, k1, v1);
                }
                if (bottom) {
                    v2 = _mm512_maskz_loadu_ps(m, g->x + o1 + c0);
                    k2 = _mm512_cmp_ps_mask(v2, best, _CMP_GT_OQ);
                    best = _mm512_mask_mov_ps(best, k2, v2);
                    if (right) {
                        v3 = _mm512_maskz_loadu_ps(m, g->x + o1 + c + c0);
                        k3 = _mm512_cmp_ps_mask(v3, best, _CMP_GT_OQ);
                    }
                }
                const __m512 gv = _mm512_add_ps(zero, _mm512_maskz_loadu_ps(m, grad + c0));
                _mm512_mask_storeu_ps(
                    g->dx + o0 + c0, m,
                    _mm512_maskz_mov_ps((__mmask16) ~(k1 | k2 | k3), relu_gate16(g, gv, v0)));
                if (right)
                    _mm512_mask_storeu_ps(
                        g->dx + o0 + c + c0, m,
                        _mm512_maskz_mov_ps(k1 & ~(k2 | k3), relu_gate16(g, gv, v1)));
                if (bottom) {
                    _mm512_mask_storeu_ps(g->dx + o1 + c0, m,
                                          _mm512_maskz_mov_ps(k2 & ~k3, relu_gate16(g, gv, v2)));
                    if (right)
                        _mm512_mask_storeu_ps(g->dx + o1 + c + c0, m,
                                              _mm512_maskz_mov_ps(k3, relu_gate16(g, gv, v3)));
                }
            }
        }
    }
}

/* 2x2 windows, stride 2, no top/left pad: done here (1), else the template's loops (0) */
static int max_pool_fast(const pool_geo *g, int64_t lo, int64_t hi)
{
    if (!pool_2x2(g))
        return 0;
    if (g->c > 1)
        pool_nhwc_2x2(g, lo, hi);
    else if (flat_ok(g))
        max_pool_flat(g, lo, hi);
    else
        max_pool_rows_c1_avx512(g, lo, hi);
    return 1;
}

static int max_pool_grad_fast(const pool_geo *g, int64_t lo, int64_t hi)
{
    if (!pool_2x2(g))
        return 0;
    if (g->c > 1)
        pool_grad_nhwc_2x2(g, lo, hi);
    else if (flat_ok(g))
        max_pool_grad_flat(g, lo, hi);
    else
        max_pool_grad_rows_c1_avx512(g, lo, hi);
    return 1;
}

#define MG_ISA_NAME avx512
#define POOL_FAST_MAX max_pool_fast
#define POOL_FAST_MAX_GRAD max_pool_grad_fast
#include "pooling_template.h"

MG_TARGET_END
#endif

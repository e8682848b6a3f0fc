/* minigraph native max pooling, ReLU and Adam (float32); see pool.h.
 *
 * Pools run over output rows (image, y) split in contiguous ranges between threads; the
 * loops over channels (NHWC) are vectorized by the compiler, once for AVX-512 and once for
 * the baseline ISA (pool_loops.h), chosen with mg_isa(). An NCHW tensor is pooled as
 * n * c single-channel NHWC images. ReLU and Adam are plain vectorized loops.
 */
#include "pool.h"

#include <string.h>

#include "mg_runtime.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static int nn_use_avx512(void) { return mg_isa() == MG_ISA_AVX512; }

typedef struct {
    const float *x, *g;
    float *y, *dx;
    int64_t h, w, c, kh, kw, sh, sw, pt, pl, oh, ow;
} pool_geo;

/* Output row `row` (image *img, output y = row % oh) reads input rows [*ya, *yb): its window
 * clipped to the image. */
static inline void window_rows(const pool_geo *g, int64_t row, int64_t *img, int64_t *ya,
                               int64_t *yb)
{
    *img = row / g->oh;
    const int64_t top = (row % g->oh) * g->sh - g->pt, bottom = top + g->kh;
    *ya = top < 0 ? 0 : top;
    *yb = bottom > g->h ? g->h : bottom;
}

/* Output column ox reads input columns [*xa, *xb): its window clipped to the image. */
static inline void window_cols(const pool_geo *g, int64_t ox, int64_t *xa, int64_t *xb)
{
    const int64_t left = ox * g->sw - g->pl, right = left + g->kw;
    *xa = left < 0 ? 0 : left;
    *xb = right > g->w ? g->w : right;
}

enum { CB = 64 }; /* channels per block of the argmax loops */

/* Single-channel images (NCHW planes): scalar windows. */
static inline float max_nan(float best, float v) { return (v > best || v != v) ? v : best; }

static void max_pool_rows_c1_generic(const pool_geo *g, int64_t lo, int64_t hi)
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

static void max_pool_grad_rows_c1_generic(const pool_geo *g, int64_t lo, int64_t hi)
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

#if MG_X86
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

/* Single-channel images, 2x2 windows with stride 2 and no top/left padding (the common NCHW
 * pool): 16 windows of an output row per vector; the two input rows are loaded as 32
 * columns and split into even and odd columns. A last odd column (SAME) or a last input row
 * (odd h, SAME) that is missing is left out of its windows. */
static inline AVX512 __mmask16 mask_n(int64_t n)
{
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1u);
}

typedef struct {
    __m512 even, odd;
} pair;

static inline AVX512 pair load_pair(const float *row, int64_t ncols)
{
    const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const __m512 lo = _mm512_maskz_loadu_ps(mask_n(ncols), row);
    const __m512 hi = ncols > 16 ? _mm512_maskz_loadu_ps(mask_n(ncols - 16), row + 16)
                                 : _mm512_setzero_ps();
    return (pair){_mm512_permutex2var_ps(lo, ie, hi), _mm512_permutex2var_ps(lo, io, hi)};
}

static inline AVX512 void store_pair(float *row, int64_t ncols, __m512 even, __m512 odd)
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

/* best = v where v > best or v is NaN (numpy.maximum-like: NaN propagates) */
static inline AVX512 __m512 max_nan16(__m512 best, __m512 v, __mmask16 valid)
{
    const __mmask16 take = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) |
                           _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(best, take & valid, v);
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

static AVX512 void flat_setup(const pool_geo *g, flat_plan *p)
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

static inline AVX512 void flat_load(const flat_plan *p, const float *x, __m512 v[4])
{
    const __m512 z0 = _mm512_loadu_ps(x), z1 = _mm512_loadu_ps(x + 16);
    const __m512 z2 = _mm512_loadu_ps(x + 32), z3 = _mm512_loadu_ps(x + 48);
    for (int s = 0; s < 4; ++s)
        v[s] = _mm512_mask_blend_ps(p->high[s], _mm512_permutex2var_ps(z0, p->pick[s], z1),
                                    _mm512_permutex2var_ps(z2, p->pick[s], z3));
}

/* output rows [lo, hi): whole 16-output blocks, the rest row by row */
static AVX512 void max_pool_rows_c1_avx512(const pool_geo *g, int64_t lo, int64_t hi);

static AVX512 void max_pool_flat(const pool_geo *g, int64_t lo, int64_t hi)
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

static AVX512 void max_pool_grad_rows_c1_avx512(const pool_geo *g, int64_t lo, int64_t hi);

static AVX512 void max_pool_grad_flat(const pool_geo *g, int64_t lo, int64_t hi)
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
            d[s] = _mm512_maskz_mov_ps(win[s], gv);
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

static AVX512 void max_pool_rows_c1_avx512(const pool_geo *g, int64_t lo, int64_t hi)
{
    if (!pool_2x2(g)) {
        max_pool_rows_c1_generic(g, lo, hi);
        return;
    }
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

static AVX512 void max_pool_grad_rows_c1_avx512(const pool_geo *g, int64_t lo, int64_t hi)
{
    if (!pool_2x2(g)) {
        max_pool_grad_rows_c1_generic(g, lo, hi);
        return;
    }
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
            store_pair(g->dx + off + 2 * ox, ncols, _mm512_maskz_mov_ps(w0, gv),
                       _mm512_maskz_mov_ps(w1, gv));
            if (bottom)
                store_pair(g->dx + off + w + 2 * ox, ncols, _mm512_maskz_mov_ps(w2, gv),
                           _mm512_maskz_mov_ps(w3, gv));
        }
    }
}

/* NHWC (several channels), 2x2 windows with stride 2 and no top/left padding: per window,
 * 16 channels at a time; a window cut by the bottom or right edge (SAME) has fewer
 * offsets. */
static AVX512 void pool_nhwc_2x2(const pool_geo *g, int64_t lo, int64_t hi)
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

static AVX512 void pool_grad_nhwc_2x2(const pool_geo *g, int64_t lo, int64_t hi)
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
                _mm512_mask_storeu_ps(g->dx + o0 + c0, m,
                                      _mm512_maskz_mov_ps((__mmask16) ~(k1 | k2 | k3), gv));
                if (right)
                    _mm512_mask_storeu_ps(g->dx + o0 + c + c0, m,
                                          _mm512_maskz_mov_ps(k1 & ~(k2 | k3), gv));
                if (bottom) {
                    _mm512_mask_storeu_ps(g->dx + o1 + c0, m,
                                          _mm512_maskz_mov_ps(k2 & ~k3, gv));
                    if (right)
                        _mm512_mask_storeu_ps(g->dx + o1 + c + c0, m,
                                              _mm512_maskz_mov_ps(k3, gv));
                }
            }
        }
    }
}

static AVX512 void pool_c1_avx512(const pool_geo *g, int64_t lo, int64_t hi)
{
    if (flat_ok(g))
        max_pool_flat(g, lo, hi);
    else
        max_pool_rows_c1_avx512(g, lo, hi);
}

static AVX512 void pool_grad_c1_avx512(const pool_geo *g, int64_t lo, int64_t hi)
{
    if (flat_ok(g))
        max_pool_grad_flat(g, lo, hi);
    else
        max_pool_grad_rows_c1_avx512(g, lo, hi);
}
#endif

#define pool_c1_generic max_pool_rows_c1_generic
#define pool_grad_c1_generic max_pool_grad_rows_c1_generic

#define LOOP_ATTR
#define SUFFIX generic
#include "pool_loops.h"
#undef LOOP_ATTR
#undef SUFFIX

#if MG_X86
#define LOOP_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#define SUFFIX avx512
#include "pool_loops.h"
#undef LOOP_ATTR
#undef SUFFIX
#define PICK(name) (nn_use_avx512() ? name##_avx512 : name##_generic)
#else
#define PICK(name) name##_generic
#endif

typedef void (*rows_fn)(const pool_geo *g, int64_t lo, int64_t hi);

static void run_rows(rows_fn fn, const pool_geo *g, int64_t rows, int nt)
{
    if (nt <= 1) {
        fn(g, 0, rows);
        return;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        mg_split(rows, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        fn(g, lo, hi);
    }
#endif
}

static int pool_setup(pool_geo *g, int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                      int64_t kw, int64_t sh, int64_t sw, int64_t pt, int64_t pl, int64_t oh,
                      int64_t ow, int channels_last, int64_t *rows)
{
    if (n < 0 || h < 0 || w < 0 || c < 0 || kh <= 0 || kw <= 0 || sh <= 0 || sw <= 0 ||
        pt < 0 || pl < 0 || pt >= kh || pl >= kw || oh < 0 || ow < 0)
        return MG_EINVAL;
    /* window geometry below 2^31 (so y * sh - pt + kh never overflows), and every window
     * starting inside the image: (out - 1) * stride - pad < size, as SAME, VALID and
     * EXPLICIT (pads < window) give; the 2x2 paths read row 2 * oy and column 2 * ox */
    if (kh > INT32_MAX || kw > INT32_MAX || sh > INT32_MAX || sw > INT32_MAX ||
        oh > INT32_MAX || ow > INT32_MAX || (oh > 0 && (oh - 1) * sh - pt >= h) ||
        (ow > 0 && (ow - 1) * sw - pl >= w))
        return MG_EINVAL;
    if (!channels_last) { /* n * c single-channel images */
        n *= c;
        c = 1;
    }
    g->h = h, g->w = w, g->c = c, g->kh = kh, g->kw = kw, g->sh = sh, g->sw = sw;
    g->pt = pt, g->pl = pl, g->oh = oh, g->ow = ow;
    *rows = n * oh;
    return 0;
}

int mg_max_pool(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                int64_t out_w, int channels_last, const float *x, float *y, int num_threads)
{
    pool_geo g = {.x = x, .y = y};
    int64_t rows;
    const int err = pool_setup(&g, n, h, w, c, kh, kw, sh, sw, pad_top, pad_left, out_h,
                               out_w, channels_last, &rows);
    if (err || (rows * out_w * g.c > 0 && (!x || !y)))
        return err ? err : MG_EINVAL;
    rows_fn fn = PICK(max_pool_rows);
#if MG_X86
    if (nn_use_avx512() && g.c > 1 && pool_2x2(&g))
        fn = pool_nhwc_2x2;
#endif
    run_rows(fn, &g, rows, mg_stream_threads(num_threads, n * h * w * c));
    return 0;
}

int mg_max_pool_grad(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                     int64_t sh, int64_t sw, int64_t pad_top, int64_t pad_left, int64_t out_h,
                     int64_t out_w, int channels_last, const float *x, const float *g,
                     float *dx, int num_threads)
{
    pool_geo geo = {.x = x, .g = g, .dx = dx};
    int64_t rows;
    const int err = pool_setup(&geo, n, h, w, c, kh, kw, sh, sw, pad_top, pad_left, out_h,
                               out_w, channels_last, &rows);
    if (err || sh < kh || sw < kw)
        return err ? err : MG_EINVAL;
    if (n * h * w * c == 0)
        return 0;
    if (!x || !g || !dx)
        return MG_EINVAL;
    /* the windows write every element they cover; zero the rest first unless they tile */
    if (!(sh == kh && sw == kw && out_h * sh - pad_top >= h && out_w * sw - pad_left >= w))
        memset(dx, 0, (size_t)(n * h * w * c) * sizeof(float));
    rows_fn fn = PICK(max_pool_grad_rows);
#if MG_X86
    if (nn_use_avx512() && geo.c > 1 && pool_2x2(&geo))
        fn = pool_grad_nhwc_2x2;
#endif
    run_rows(fn, &geo, rows, mg_stream_threads(num_threads, n * h * w * c));
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* elementwise: chunks of whole cache lines per thread */

static void chunk(int64_t count, int tid, int nth, int64_t *lo, int64_t *hi)
{
    const int64_t lines = (count + 15) / 16;
    mg_split(lines, tid, nth, lo, hi);
    *lo *= 16;
    *hi = *hi * 16 < count ? *hi * 16 : count;
}

int mg_relu(int64_t count, const float *x, float *y, int num_threads)
{
    if (count < 0 || (count && (!x || !y)))
        return MG_EINVAL;
    void (*fn)(const float *, float *, int64_t) = PICK(relu_range);
    const int nt = mg_stream_threads(num_threads, count);
    if (nt <= 1) {
        fn(x, y, count);
        return 0;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        chunk(count, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (hi > lo)
            fn(x + lo, y + lo, hi - lo);
    }
#endif
    return 0;
}

int mg_relu_grad(int64_t count, const float *g, const float *features, float *dx,
                 int num_threads)
{
    if (count < 0 || (count && (!g || !features || !dx)))
        return MG_EINVAL;
    void (*fn)(const float *, const float *, float *, int64_t) = PICK(relu_grad_range);
    const int nt = mg_stream_threads(num_threads, count);
    if (nt <= 1) {
        fn(g, features, dx, count);
        return 0;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        chunk(count, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (hi > lo)
            fn(g + lo, features + lo, dx + lo, hi - lo);
    }
#endif
    return 0;
}

int mg_apply_adam(int64_t count, const float *var, const float *m, const float *v,
                  const float *grad, float lr_t, float beta1, float beta2, float epsilon,
                  int use_nesterov, float *var_out, float *m_out, float *v_out)
{
    if (count < 0 || (count && (!var || !m || !v || !grad || !var_out || !m_out || !v_out)))
        return MG_EINVAL;
    PICK(adam_range)(var, m, v, grad, var_out, m_out, v_out, lr_t, beta1, beta2, epsilon,
                     use_nesterov, count);
    return 0;
}

/* AVX-512 convolution micro-kernels (see convolution_internal.h for what a tile is).
 *
 * Forward / input gradient: P pixels x V vectors of 16 output channels held in P * V zmm
 * accumulators (24 of the 32 registers); per filter tap, V filter vectors are loaded and
 * each pixel's input value is broadcast into V FMAs. Filter gradient: R filter rows x V
 * vectors; per pixel, V dy vectors are loaded and each row's input value broadcast.
 * P x V (forward): 10x1, 12x2, 8x3, 6x4; R x V (filter gradient): every R up to 24x1,
 * 13x2, 8x3, 6x4; each also with its last vector of at most 8 channels in a ymm register
 * (`fwd_half`, `bwf_half`). 10 pixels, not 12, for one
 * vector: with 12, the pixels' 12 input pointers and the loop's own registers outgrow the
 * 15 general registers, GCC moves two pointers through vector registers on every tap, and
 * the tile ran ~7% slower.
 *
 * The AVX-512 instantiation of the family (its table is conv_kernels_avx512, as
 * convolution_template.h defines the others'), hand-written for speed. Compiled for these
 * extensions and used only when the runtime's ISA is AVX-512 (mg_isa_pick in
 * convolution.c). */
#include "convolution_internal.h"

#if MG_X86
#include <immintrin.h>

MG_TARGET_AVX512_BEGIN

#define UNROLL _Pragma("GCC unroll 32") /* more than the tallest tile */

static inline __mmask16 lane_mask(int n) { return (__mmask16)((1u << n) - 1u); }

/* The epilogue's stages (activations.h) on the tile's sums, one vector of channels at a
 * time: an add, a fused multiply-add, an add, then the activation's select, each as the
 * scalar formulas of activations_template.h / activations_internal.h round and choose (the
 * rounding of the unfused ops). Pixels past npix read no residual (they are not stored). */
static inline __attribute__((always_inline)) void
fwd_epilogue(const nn_fwd_tile *t, __m512 acc[NN_MAX_TILE][4], const int P, const int V,
             __mmask16 last)
{
    const mg_epilogue *e = t->ep;
    const __m512 zero = _mm512_setzero_ps(), six = _mm512_set1_ps(6.0f);
    UNROLL for (int v = 0; v < V; ++v)
    {
        const __mmask16 m = v == V - 1 ? last : (__mmask16)0xffff;
        const int64_t ch = t->ch0 + 16 * v;
        const __m512 bias = e->bias ? _mm512_maskz_loadu_ps(m, e->bias + ch) : zero;
        const __m512 mean = e->mean ? _mm512_maskz_loadu_ps(m, e->mean + ch) : zero;
        const __m512 k = e->mean ? _mm512_maskz_loadu_ps(m, e->k + ch) : zero;
        const __m512 offset = e->mean ? _mm512_maskz_loadu_ps(m, e->offset + ch) : zero;
        UNROLL for (int p = 0; p < P; ++p)
        {
            __m512 y = acc[p][v];
            if (e->bias)
                y = _mm512_add_ps(y, bias);
            if (e->mean)
                y = _mm512_fmadd_ps(_mm512_sub_ps(y, mean), k, offset);
            if (e->residual && p < t->npix)
                y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, t->res + t->yoff[p] + 16 * v));
            if (e->activation == 1) { /* x > 0 or NaN: x, else +0 */
                y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, zero, _CMP_NLE_UQ), y);
            } else if (e->activation == 2) { /* x > 0: min(x, 6); NaN: x; else +0 */
                const __mmask16 positive = _mm512_cmp_ps_mask(y, zero, _CMP_GT_OQ);
                const __m512 kept = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q), y);
                y = _mm512_mask_mov_ps(kept, positive, _mm512_min_ps(y, six));
            }
            acc[p][v] = y;
        }
    }
}

/* H = 1: the last vector holds at most 8 channels and is summed in a ymm register (lanes
 * 0-7 of the same fused multiply-adds: the same bits), half the work of a zmm one on CPUs
 * that split a 512-bit operation in two (AMD Zen 4). */
static inline __attribute__((always_inline)) void fwd_body(const nn_fwd_tile *t, const int P,
                                                           const int V, const int H)
{
    __m512 acc[NN_MAX_TILE][4];
    __m256 half[NN_MAX_TILE];
    const float *xp[NN_MAX_TILE];
    const int W = V - H; /* zmm vectors */
    UNROLL for (int p = 0; p < P; ++p)
    {
        xp[p] = t->x + t->off[p];
        UNROLL for (int v = 0; v < W; ++v) acc[p][v] = _mm512_setzero_ps();
        half[p] = _mm256_setzero_ps();
    }
    const int64_t K = t->K, cop = t->cop, rs = t->row_stride, frs = t->frs;
    const float *f = t->f;
    for (int64_t i = 0; i < t->kh; ++i) {
        const float *fk = f;
        for (int64_t k = 0; k < K; ++k, fk += cop) {
            __m512 fv[4];
            UNROLL for (int v = 0; v < W; ++v) fv[v] = _mm512_loadu_ps(fk + 16 * v);
            const __m256 fh = H ? _mm256_loadu_ps(fk + 16 * W) : _mm256_setzero_ps();
            UNROLL for (int p = 0; p < P; ++p)
            {
                const __m512 b = _mm512_set1_ps(xp[p][k]);
                UNROLL for (int v = 0; v < W; ++v) acc[p][v] = _mm512_fmadd_ps(b, fv[v], acc[p][v]);
                if (H)
                    half[p] = _mm256_fmadd_ps(_mm256_set1_ps(xp[p][k]), fh, half[p]);
            }
        }
        f += frs;
        UNROLL for (int p = 0; p < P; ++p) xp[p] += rs;
    }
    if (H)
        UNROLL for (int p = 0; p < P; ++p) acc[p][W] = _mm512_zextps256_ps512(half[p]);
    const __mmask16 last = lane_mask(t->last_lanes);
    if (t->ep)
        fwd_epilogue(t, acc, P, V, last);
    UNROLL for (int p = 0; p < P; ++p)
    {
        if (p < t->npix) {
            float *y = t->y + t->yoff[p];
            UNROLL for (int v = 0; v < V; ++v)
                _mm512_mask_storeu_ps(y + 16 * v, v == V - 1 ? last : (__mmask16)0xffff, acc[p][v]);
        }
    }
}

/* H = 1: the last vector (at most 8 channels) in a ymm register, as fwd_body's */
static inline __attribute__((always_inline)) void bwf_body(const nn_bwf_tile *t, const int R,
                                                           const int V, const int H)
{
    __m512 acc[NN_BWF_MAX_ROWS][4];
    __m256 half[NN_BWF_MAX_ROWS];
    const int W = V - H; /* zmm vectors */
    __mmask16 m[4];
    UNROLL for (int v = 0; v < V; ++v) m[v] = v == V - 1 ? lane_mask(t->last_lanes) : 0xffff;
    UNROLL for (int r = 0; r < R; ++r)
    {
        const float *d = t->df + (r < t->nrows ? r : t->nrows - 1) * t->df_stride;
        UNROLL for (int v = 0; v < V; ++v) acc[r][v] =
            t->accumulate ? _mm512_maskz_loadu_ps(m[v], d + 16 * v) : _mm512_setzero_ps();
        half[r] = _mm512_castps512_ps256(acc[r][V - 1]);
    }
    const int64_t c = t->c, ds = t->dy_stride;
    for (int64_t n = 0; n < t->nimg; ++n)
        for (int64_t y = 0; y < t->ny; ++y) {
            const float *xq = t->x + n * t->img_stride + y * t->row_stride;
            const float *dq = t->dy + n * t->dy_img_stride + y * t->dy_row_stride;
            for (int64_t x = 0; x < t->nx; ++x, xq += c, dq += ds) {
                __m512 d[4];
                UNROLL for (int v = 0; v < W; ++v) d[v] = _mm512_maskz_loadu_ps(m[v], dq + 16 * v);
                const __m256 dh = H ? _mm256_maskz_loadu_ps((__mmask8)m[W], dq + 16 * W)
                                    : _mm256_setzero_ps();
                UNROLL for (int r = 0; r < R; ++r)
                {
                    const __m512 b = _mm512_set1_ps(xq[r]);
                    UNROLL for (int v = 0; v < W; ++v) acc[r][v] = _mm512_fmadd_ps(b, d[v], acc[r][v]);
                    if (H)
                        half[r] = _mm256_fmadd_ps(_mm256_set1_ps(xq[r]), dh, half[r]);
                }
            }
        }
    UNROLL for (int r = 0; r < R; ++r)
    {
        if (H)
            acc[r][W] = _mm512_zextps256_ps512(half[r]);
        if (r < t->nrows) {
            float *d = t->df + r * t->df_stride;
            UNROLL for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(d + 16 * v, m[v], acc[r][v]);
        }
    }
}

#define FWD(P, V)                                                                            \
    static void fwd_##P##x##V(const nn_fwd_tile *t) { fwd_body(t, P, V, 0); }                \
    static void fwd_##P##x##V##h(const nn_fwd_tile *t) { fwd_body(t, P, V, 1); }
#define BWF(R, V)                                                                            \
    static void bwf_##R##x##V(const nn_bwf_tile *t) { bwf_body(t, R, V, 0); }                \
    static void bwf_##R##x##V##h(const nn_bwf_tile *t) { bwf_body(t, R, V, 1); }

FWD(10, 1)
FWD(12, 2)
FWD(8, 3)
FWD(6, 4)
/* Forward tiles of every narrower width too: the driver cuts a run of pixels into tiles
 * whose widths differ by at most one (256 pixels of 2 vectors: 14 tiles of 12 and 8 of 11,
 * where 12-pixel tiles computed 264), and the runs of border pixels that skip the same taps
 * are short (the 4 corners: 1 pixel an image) */
#define FWD_WIDTHS5(M, V) M(1, V) M(2, V) M(3, V) M(4, V) M(5, V)
#define FWD_WIDTHS7(M, V) FWD_WIDTHS5(M, V) M(6, V) M(7, V)
#define FWD_WIDTHS9(M, V) FWD_WIDTHS7(M, V) M(8, V) M(9, V)
#define FWD_WIDTHS11(M, V) FWD_WIDTHS9(M, V) M(10, V) M(11, V)
FWD_WIDTHS9(FWD, 1)
FWD_WIDTHS11(FWD, 2)
FWD_WIDTHS7(FWD, 3)
FWD_WIDTHS5(FWD, 4)
#define FWD_FULL(P, V) fwd_##P##x##V,
#define FWD_HALF(P, V) fwd_##P##x##V##h,
/* Filter-gradient tiles of every height up to what the registers hold (R x V accumulators
 * and V dy vectors: 24x1, 13x2, 8x3, 6x4), so a tap row of K filter rows is cut into tiles
 * of nearly equal heights, none computed in vain (a 3-channel 3x3 stem, K = 9: one tile of
 * 9 rows, where 12-row tiles computed 12) */
#define ROWS6(M, V) M(1, V) M(2, V) M(3, V) M(4, V) M(5, V) M(6, V)
#define ROWS8(M, V) ROWS6(M, V) M(7, V) M(8, V)
#define ROWS13(M, V) ROWS8(M, V) M(9, V) M(10, V) M(11, V) M(12, V) M(13, V)
#define ROWS24(M, V)                                                                         \
    ROWS13(M, V) M(14, V) M(15, V) M(16, V) M(17, V) M(18, V) M(19, V) M(20, V) M(21, V)    \
    M(22, V) M(23, V) M(24, V)
ROWS24(BWF, 1)
ROWS13(BWF, 2)
ROWS8(BWF, 3)
ROWS6(BWF, 4)
#define BWF_FULL(R, V) bwf_##R##x##V,
#define BWF_HALF(R, V) bwf_##R##x##V##h,

static inline __m512 lo_pd(__m512 a, __m512 b)
{
    return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

static inline __m512 hi_pd(__m512 a, __m512 b)
{
    return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

/* 16 x 16 in registers: pairs of floats, pairs of pairs, then 128-bit lanes twice */
static void transpose_16(const float *const *src, int nsrc, int lanes, float *const *dst)
{
    __m512 r[16], t[16], u[16];
    const __mmask16 in = lane_mask(lanes), out = lane_mask(nsrc);
    UNROLL for (int i = 0; i < 16; ++i) r[i] =
        i < nsrc ? _mm512_maskz_loadu_ps(in, src[i]) : _mm512_setzero_ps();
    UNROLL for (int i = 0; i < 8; ++i)
    {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    UNROLL for (int i = 0; i < 4; ++i)
    {
        u[4 * i + 0] = lo_pd(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = hi_pd(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = lo_pd(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = hi_pd(t[4 * i + 1], t[4 * i + 3]);
    }
    UNROLL for (int i = 0; i < 2; ++i) UNROLL for (int k = 0; k < 4; ++k)
    {
        t[8 * i + k] = _mm512_shuffle_f32x4(u[8 * i + k], u[8 * i + 4 + k], 0x88);
        t[8 * i + 4 + k] = _mm512_shuffle_f32x4(u[8 * i + k], u[8 * i + 4 + k], 0xdd);
    }
    UNROLL for (int k = 0; k < 8; ++k)
    {
        r[k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
        r[k + 8] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xdd);
    }
    for (int j = 0; j < lanes; ++j)
        _mm512_mask_storeu_ps(dst[j], out, r[j]);
}

const conv_kernel_table conv_kernels_avx512 = {
    .fwd_pixels = {0, 10, 12, 8, 6},
    .fwd = {0, fwd_10x1, fwd_12x2, fwd_8x3, fwd_6x4},
    .fwd_half = {0, fwd_10x1h, fwd_12x2h, fwd_8x3h, fwd_6x4h},
    .fwd_narrow = {{0}, {0, FWD_WIDTHS9(FWD_FULL, 1)}, {0, FWD_WIDTHS11(FWD_FULL, 2)},
                   {0, FWD_WIDTHS7(FWD_FULL, 3)}, {0, FWD_WIDTHS5(FWD_FULL, 4)}},
    .fwd_narrow_half = {{0}, {0, FWD_WIDTHS9(FWD_HALF, 1)}, {0, FWD_WIDTHS11(FWD_HALF, 2)},
                        {0, FWD_WIDTHS7(FWD_HALF, 3)}, {0, FWD_WIDTHS5(FWD_HALF, 4)}},
    .bwf_rows = {0, 24, 13, 8, 6},
    .bwf = {{0}, {0, ROWS24(BWF_FULL, 1)}, {0, ROWS13(BWF_FULL, 2)}, {0, ROWS8(BWF_FULL, 3)},
            {0, ROWS6(BWF_FULL, 4)}},
    .bwf_half = {{0}, {0, ROWS24(BWF_HALF, 1)}, {0, ROWS13(BWF_HALF, 2)},
                 {0, ROWS8(BWF_HALF, 3)}, {0, ROWS6(BWF_HALF, 4)}},
    .bwf_chunk_pixels = 512,
    .transpose = transpose_16,
};

MG_TARGET_END
#endif

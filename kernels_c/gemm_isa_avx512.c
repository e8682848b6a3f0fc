/* AVX-512 GEMM micro-kernel: 12 rows x 32 columns in 24 zmm accumulators; per k, two B
 * vectors are loaded and each row's A value broadcast into two FMAs. The full tile (12 rows,
 * 32 columns) is its own instantiation, so its loads and stores have no masks or row tests; a
 * tile of at most 4, 6 or 8 rows computes only that many (few-pixel 1x1 convolutions, dense
 * layers). The narrow kernel (nr <= 16): 24 rows x 16 columns, one zmm accumulator per row,
 * one B vector per k and an FMA per row with A's value broadcast from memory. Both also run
 * a list of segments (rows and k steps) in one call, the tile kept in registers (_taps). A tail
 * (gemm_internal.h) is applied to the accumulators before the stores (vtail: the stages of
 * activations_template.h, lane by lane the same roundings: add, sub then one FMA, add, and
 * Relu / Relu6 as masks that keep NaN and give +0). Compiled for these extensions and used only when the runtime's ISA is AVX-512 (mg_isa_pick
 * in gemm.c). */
#include "gemm_internal.h"

#if MG_X86
#include <immintrin.h>

MG_TARGET_AVX512_BEGIN

enum { MR = 12 };
#define UNROLL _Pragma("GCC unroll 16")

static inline __mmask16 lanes16(int n)
{
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1u);
}

/* The tail's per-column vectors of one 16-column half (lanes m) */
typedef struct {
    __m512 bias, mean, k, offset;
} tail_vecs;

static inline __attribute__((always_inline)) tail_vecs tail_load(const gemm_tail *t, int h,
                                                                 __mmask16 m)
{
    tail_vecs v;
    const int o = 16 * h;
    v.bias = t->bias ? _mm512_maskz_loadu_ps(m, t->bias + o) : _mm512_setzero_ps();
    v.mean = t->mean ? _mm512_maskz_loadu_ps(m, t->mean + o) : _mm512_setzero_ps();
    v.k = t->mean ? _mm512_maskz_loadu_ps(m, t->k + o) : _mm512_setzero_ps();
    v.offset = t->mean ? _mm512_maskz_loadu_ps(m, t->offset + o) : _mm512_setzero_ps();
    return v;
}

/* The tail on row i's accumulator of half h (lanes m) */
static inline __attribute__((always_inline)) __m512 vtail(const gemm_tail *t, const tail_vecs *v,
                                                          __m512 y, int i, int h, __mmask16 m)
{
    if (t->bias)
        y = _mm512_add_ps(y, v->bias);
    if (t->mean)
        y = _mm512_fmadd_ps(_mm512_sub_ps(y, v->mean), v->k, v->offset);
    if (t->residual)
        y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m, t->residual + i * t->ldr + 16 * h));
    if (t->activation == 1) { /* x > 0 or NaN: x; else +0 */
        y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_NLE_UQ), y);
    } else if (t->activation == 2) { /* x > 0: min(x, 6); NaN: x; else +0 */
        const __m512 six = _mm512_set1_ps(6.0f);
        const __mmask16 pos = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GT_OQ);
        const __mmask16 nan = _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q);
        const __mmask16 big = _mm512_cmp_ps_mask(y, six, _CMP_NLT_UQ);
        y = _mm512_maskz_mov_ps(pos | nan, _mm512_mask_mov_ps(y, pos & big, six));
    }
    return y;
}

static inline void prefetch_residual(const gemm_tail *tail, int mr, int nr)
{
    if (tail && tail->residual)
        for (int i = 0; i < mr; ++i) {
            __builtin_prefetch(tail->residual + i * tail->ldr, 0, 3);
            __builtin_prefetch(tail->residual + i * tail->ldr + nr - 1, 0, 3);
        }
}

/* ntaps segments of kc steps: segment t reads rows[t * rstride + i] (and B on from where the
 * one before stopped), the accumulators kept in registers across them */
static inline __attribute__((always_inline)) void
micro_body(int64_t ntaps, int64_t rstride, int64_t kc, const float *const *rows, int64_t ks,
           const float *bp, float *c, int64_t ldc, const int mr, const int nr, const int load,
           const int R, const gemm_tail *tail)
{
    gemm_prefetch_tile(c, ldc, mr, nr);
    prefetch_residual(tail, mr, nr);
    const __mmask16 m0 = lanes16(nr), m1 = lanes16(nr - 16);
    __m512 acc[MR][2];
    UNROLL for (int i = 0; i < R; ++i)
    {
        const int on = load && i < mr;
        acc[i][0] = on ? _mm512_maskz_loadu_ps(m0, c + i * ldc) : _mm512_setzero_ps();
        acc[i][1] = on ? _mm512_maskz_loadu_ps(m1, c + i * ldc + 16) : _mm512_setzero_ps();
    }
    /* the k steps: R row pointers, B's and one index in registers (a row-major A counts
     * its index up from -kc to 0 off pointers at the rows' ends, so that no register holds
     * kc: 12 rows leave none to spare) */
    const int64_t o_end = ks == 1 ? 0 : kc * ks;
    for (int64_t t = 0; t < ntaps; ++t, rows += rstride) {
        const float *r[MR];
        UNROLL for (int i = 0; i < R; ++i) r[i] = rows[i] + (ks == 1 ? kc : 0);
        for (int64_t o = ks == 1 ? -kc : 0; o != o_end; o += ks, bp += MG_GEMM_NR) {
            const __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
            UNROLL for (int i = 0; i < R; ++i)
            {
                const __m512 x = _mm512_set1_ps(r[i][o]);
                acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
                acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
            }
        }
    }
    if (tail)
        for (int h = 0; h < 2; ++h) {
            const __mmask16 m = h ? m1 : m0;
            const tail_vecs v = tail_load(tail, h, m);
            UNROLL for (int i = 0; i < R; ++i) if (i < mr)
                acc[i][h] = vtail(tail, &v, acc[i][h], i, h, m);
        }
    UNROLL for (int i = 0; i < R; ++i) if (i < mr)
    {
        _mm512_mask_storeu_ps(c + i * ldc, m0, acc[i][0]);
        _mm512_mask_storeu_ps(c + i * ldc + 16, m1, acc[i][1]);
    }
}

static void gemm_micro_taps_tail_avx512(int64_t ntaps, int64_t rstride, int64_t kc,
                                        const float *const *rows, int64_t ks, const float *bp,
                                        float *c, int64_t ldc, int mr, int nr, int load,
                                        const gemm_tail *tail)
{
#define MICRO(MR_, NR_, LOAD_, R_) \
    micro_body(ntaps, rstride, kc, rows, ks, bp, c, ldc, MR_, NR_, LOAD_, R_, tail)
    if (mr == MR && nr == MG_GEMM_NR) {
        if (load)
            MICRO(MR, MG_GEMM_NR, 1, MR);
        else
            MICRO(MR, MG_GEMM_NR, 0, MR);
    } else {
        switch (mr) { /* a shorter tile: only its rows computed */
#define ROWS(R_) case R_: MICRO(R_, nr, load, R_); break;
        ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8) ROWS(9) ROWS(10)
        ROWS(11)
#undef ROWS
        default:
            MICRO(mr, nr, load, MR);
        }
    }
#undef MICRO
}

static void gemm_micro_tail_avx512(int64_t kc, const float *const *rows, int64_t ks,
                                   const float *bp, float *c, int64_t ldc, int mr, int nr,
                                   int load, const gemm_tail *tail)
{
    gemm_micro_taps_tail_avx512(1, 0, kc, rows, ks, bp, c, ldc, mr, nr, load, tail);
}

static void gemm_micro_taps_avx512(int64_t ntaps, int64_t rstride, int64_t kc,
                                   const float *const *rows, int64_t ks, const float *bp,
                                   float *c, int64_t ldc, int mr, int nr, int load)
{
    gemm_micro_taps_tail_avx512(ntaps, rstride, kc, rows, ks, bp, c, ldc, mr, nr, load, NULL);
}

static void gemm_micro_avx512(int64_t kc, const float *const *rows, int64_t ks, const float *bp,
                              float *c, int64_t ldc, int mr, int nr, int load)
{
    gemm_micro_tail_avx512(kc, rows, ks, bp, c, ldc, mr, nr, load, NULL);
}

enum { MR_NARROW = 24 };

/* ntaps segments of kc steps: segment t reads rows[t * rstride + i] (and B on from where
 * the one before stopped), the accumulators kept in registers across them */
static inline __attribute__((always_inline)) void
narrow_body(int64_t ntaps, int64_t rstride, int64_t kc, const float *const *rows, int64_t ks,
            const float *bp, float *c, int64_t ldc, const int mr, const int nr, const int load,
            const int R, const gemm_tail *tail)
{
    const __mmask16 m0 = lanes16(nr);
    gemm_prefetch_tile(c, ldc, mr, nr);
    prefetch_residual(tail, mr, nr);
    __m512 acc[MR_NARROW];
    UNROLL for (int i = 0; i < R; ++i)
        acc[i] = load && i < mr ? _mm512_maskz_loadu_ps(m0, c + i * ldc) : _mm512_setzero_ps();
    for (int64_t t = 0; t < ntaps; ++t, rows += rstride) {
        const float *r[MR_NARROW];
        UNROLL for (int i = 0; i < R; ++i) r[i] = rows[i];
        for (int64_t k = 0, o = 0; k < kc; ++k, o += ks, bp += MG_GEMM_NR) {
            const __m512 b0 = _mm512_loadu_ps(bp);
            UNROLL for (int i = 0; i < R; ++i)
                acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(r[i][o]), b0, acc[i]);
        }
    }
    if (tail) {
        const tail_vecs v = tail_load(tail, 0, m0);
        UNROLL for (int i = 0; i < R; ++i) if (i < mr)
            acc[i] = vtail(tail, &v, acc[i], i, 0, m0);
    }
    UNROLL for (int i = 0; i < R; ++i) if (i < mr)
        _mm512_mask_storeu_ps(c + i * ldc, m0, acc[i]);
}

static void gemm_narrow_taps_tail_avx512(int64_t ntaps, int64_t rstride, int64_t kc,
                                         const float *const *rows, int64_t ks,
                                         const float *bp, float *c, int64_t ldc, int mr,
                                         int nr, int load, const gemm_tail *tail)
{
#define NARROW(MR_, NR_, LOAD_, R_) \
    narrow_body(ntaps, rstride, kc, rows, ks, bp, c, ldc, MR_, NR_, LOAD_, R_, tail)
    if (mr == MR_NARROW && nr == GEMM_NR_NARROW) {
        if (load)
            NARROW(MR_NARROW, GEMM_NR_NARROW, 1, MR_NARROW);
        else
            NARROW(MR_NARROW, GEMM_NR_NARROW, 0, MR_NARROW);
    } else {
        switch (mr) { /* a shorter tile: only its rows computed (23: as 24) */
#define ROWS(R_) case R_: NARROW(R_, nr, load, R_); break;
        ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8) ROWS(9) ROWS(10)
        ROWS(11) ROWS(12) ROWS(13) ROWS(14) ROWS(15) ROWS(16) ROWS(17) ROWS(18) ROWS(19)
        ROWS(20) ROWS(21) ROWS(22)
#undef ROWS
        default:
            NARROW(mr, nr, load, MR_NARROW);
        }
    }
#undef NARROW
}

static void gemm_narrow_taps_avx512(int64_t ntaps, int64_t rstride, int64_t kc,
                                    const float *const *rows, int64_t ks, const float *bp,
                                    float *c, int64_t ldc, int mr, int nr, int load)
{
    gemm_narrow_taps_tail_avx512(ntaps, rstride, kc, rows, ks, bp, c, ldc, mr, nr, load, NULL);
}

static void gemm_narrow_tail_avx512(int64_t kc, const float *const *rows, int64_t ks,
                                    const float *bp, float *c, int64_t ldc, int mr, int nr,
                                    int load, const gemm_tail *tail)
{
    gemm_narrow_taps_tail_avx512(1, 0, kc, rows, ks, bp, c, ldc, mr, nr, load, tail);
}

static void gemm_narrow_avx512(int64_t kc, const float *const *rows, int64_t ks, const float *bp,
                               float *c, int64_t ldc, int mr, int nr, int load)
{
    gemm_narrow_tail_avx512(kc, rows, ks, bp, c, ldc, mr, nr, load, NULL);
}

const gemm_kernel_table gemm_kernels_avx512 = {MR, gemm_micro_avx512, MR_NARROW,
                                               gemm_narrow_avx512, gemm_narrow_taps_avx512,
                                               gemm_micro_tail_avx512, gemm_narrow_tail_avx512,
                                               gemm_narrow_taps_tail_avx512,
                                               gemm_micro_taps_avx512};

MG_TARGET_END
#endif

/* AVX-512 GEMM micro-kernel: 12 rows x 32 columns in 24 zmm accumulators; per k, two B
 * vectors are loaded and each row's A value broadcast into two FMAs. The full tile (12 rows,
 * 32 columns) is its own instantiation, so its loads and stores have no masks or row tests; a
 * shorter tile computes only its rows, each height its own instantiation (few-pixel 1x1
 * convolutions, dense layers, and the input gradient's phase rows: 28 pixels are tiles of
 * 9, 9 and 10, which as 12-row tiles computed 36 rows, 22% in vain). The narrow kernel
 * (nr <= 16): 24 rows x 16 columns, one zmm accumulator per row, one B vector per k and an
 * FMA per row with A's value broadcast from memory. A last vector of at most 8 columns (nr
 * 17-24 wide, nr <= 8 narrow) is summed in a ymm register: lanes 0-7 of the same FMAs (the
 * same bits), half the work of a zmm one on CPUs that split a 512-bit operation in two (AMD
 * Zen 4: a 24-channel input gradient's panel, 1 thread, 58 -> 79 GFLOP/s). Both also run
 * a list of segments (rows and k steps) in one call, the tile kept in registers (_taps; _segs:
 * segments of their own lengths, as the filter gradient's output rows cut at x's edges,
 * conv_gemm_grad.c; a narrow tile of 24 rows ran ~7% slower with the lengths read per
 * segment, so the drivers call _taps where the lengths are all equal). A tail
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
micro_body(int64_t ntaps, int64_t rstride, int64_t kc, const int64_t *kcs,
           const float *const *rows, int64_t ks,
           const float *bp, float *c, int64_t ldc, const int mr, const int nr, const int load,
           const int R, const int H, const gemm_tail *tail)
{
    gemm_prefetch_tile(c, ldc, mr, nr);
    prefetch_residual(tail, mr, nr);
    const __mmask16 m0 = lanes16(nr), m1 = lanes16(nr - 16);
    __m512 acc[MR][2];
    __m256 half[MR]; /* H: columns 16 .. 23 */
    UNROLL for (int i = 0; i < R; ++i)
    {
        const int on = load && i < mr;
        acc[i][0] = on ? _mm512_maskz_loadu_ps(m0, c + i * ldc) : _mm512_setzero_ps();
        if (H)
            half[i] = on ? _mm256_maskz_loadu_ps((__mmask8)m1, c + i * ldc + 16)
                         : _mm256_setzero_ps();
        else
            acc[i][1] = on ? _mm512_maskz_loadu_ps(m1, c + i * ldc + 16) : _mm512_setzero_ps();
    }
    /* the k steps: R row pointers, B's and one index in registers (a row-major A counts
     * its index up from -kc to 0 off pointers at the rows' ends, so that no register holds
     * kc: 12 rows leave none to spare) */
    for (int64_t t = 0; t < ntaps; ++t, rows += rstride) {
        const int64_t kt = kcs ? kcs[t] : kc, o_end = ks == 1 ? 0 : kt * ks;
        const float *r[MR];
        UNROLL for (int i = 0; i < R; ++i) r[i] = rows[i] + (ks == 1 ? kt : 0);
        for (int64_t o = ks == 1 ? -kt : 0; o != o_end; o += ks, bp += MG_GEMM_NR) {
            const __m512 b0 = _mm512_loadu_ps(bp);
            const __m512 b1 = H ? _mm512_setzero_ps() : _mm512_loadu_ps(bp + 16);
            const __m256 bh = H ? _mm256_loadu_ps(bp + 16) : _mm256_setzero_ps();
            UNROLL for (int i = 0; i < R; ++i)
            {
                const __m512 x = _mm512_set1_ps(r[i][o]);
                acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
                if (H)
                    half[i] = _mm256_fmadd_ps(_mm512_castps512_ps256(x), bh, half[i]);
                else
                    acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
            }
        }
    }
    if (H)
        UNROLL for (int i = 0; i < R; ++i) acc[i][1] = _mm512_zextps256_ps512(half[i]);
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

/* kcs: NULL (every segment kc steps) or each segment's steps; inlined into each caller, so
 * that a literal NULL leaves no test in the loops (a narrow 24-row tile ran ~7% slower) */
static inline __attribute__((always_inline)) void
micro_segments(int64_t ntaps, int64_t rstride, int64_t kc, const int64_t *kcs,
               const float *const *rows, int64_t ks, const float *bp, float *c, int64_t ldc,
               int mr, int nr, int load, const gemm_tail *tail)
{
#define MICRO(MR_, NR_, LOAD_, R_, H_) \
    micro_body(ntaps, rstride, kc, kcs, rows, ks, bp, c, ldc, MR_, NR_, LOAD_, R_, H_, tail)
#define ROWS(R_, H_) case R_: MICRO(R_, nr, load, R_, H_); break;
#define TILES(H_)                                                                            \
    switch (mr) { /* a shorter tile: only its rows computed */                               \
        ROWS(1, H_) ROWS(2, H_) ROWS(3, H_) ROWS(4, H_) ROWS(5, H_) ROWS(6, H_) ROWS(7, H_)  \
        ROWS(8, H_) ROWS(9, H_) ROWS(10, H_) ROWS(11, H_)                                   \
    default:                                                                                 \
        MICRO(mr, nr, load, MR, H_);                                                         \
    }
    if (mr == MR && nr == MG_GEMM_NR) {
        if (load)
            MICRO(MR, MG_GEMM_NR, 1, MR, 0);
        else
            MICRO(MR, MG_GEMM_NR, 0, MR, 0);
    } else if (nr <= GEMM_NR_NARROW + 8) { /* columns 16 .. nr - 1 in a ymm register */
        TILES(1)
    } else {
        TILES(0)
    }
#undef TILES
#undef ROWS
#undef MICRO
}

static void gemm_micro_taps_tail_avx512(int64_t ntaps, int64_t rstride, int64_t kc,
                                        const float *const *rows, int64_t ks, const float *bp,
                                        float *c, int64_t ldc, int mr, int nr, int load,
                                        const gemm_tail *tail)
{
    micro_segments(ntaps, rstride, kc, NULL, rows, ks, bp, c, ldc, mr, nr, load, tail);
}

static void gemm_micro_segs_avx512(int64_t nseg, int64_t rstride, const int64_t *kcs,
                                   const float *const *rows, int64_t ks, const float *bp,
                                   float *c, int64_t ldc, int mr, int nr, int load)
{
    micro_segments(nseg, rstride, 0, kcs, rows, ks, bp, c, ldc, mr, nr, load, NULL);
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
narrow_body(int64_t ntaps, int64_t rstride, int64_t kc, const int64_t *kcs,
            const float *const *rows, int64_t ks,
            const float *bp, float *c, int64_t ldc, const int mr, const int nr, const int load,
            const int R, const int H, const gemm_tail *tail)
{
    const __mmask16 m0 = lanes16(nr);
    gemm_prefetch_tile(c, ldc, mr, nr);
    prefetch_residual(tail, mr, nr);
    __m512 acc[MR_NARROW];
    __m256 half[MR_NARROW]; /* H: the (at most 8) columns in a ymm register */
    UNROLL for (int i = 0; i < R; ++i)
    {
        const int on = load && i < mr;
        if (H)
            half[i] = on ? _mm256_maskz_loadu_ps((__mmask8)m0, c + i * ldc) : _mm256_setzero_ps();
        else
            acc[i] = on ? _mm512_maskz_loadu_ps(m0, c + i * ldc) : _mm512_setzero_ps();
    }
    for (int64_t t = 0; t < ntaps; ++t, rows += rstride) {
        const float *r[MR_NARROW];
        UNROLL for (int i = 0; i < R; ++i) r[i] = rows[i];
        const int64_t kt = kcs ? kcs[t] : kc;
        for (int64_t k = 0, o = 0; k < kt; ++k, o += ks, bp += MG_GEMM_NR) {
            const __m512 b0 = H ? _mm512_setzero_ps() : _mm512_loadu_ps(bp);
            const __m256 bh = H ? _mm256_loadu_ps(bp) : _mm256_setzero_ps();
            UNROLL for (int i = 0; i < R; ++i)
            {
                if (H)
                    half[i] = _mm256_fmadd_ps(_mm256_set1_ps(r[i][o]), bh, half[i]);
                else
                    acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(r[i][o]), b0, acc[i]);
            }
        }
    }
    if (H)
        UNROLL for (int i = 0; i < R; ++i) acc[i] = _mm512_zextps256_ps512(half[i]);
    if (tail) {
        const tail_vecs v = tail_load(tail, 0, m0);
        UNROLL for (int i = 0; i < R; ++i) if (i < mr)
            acc[i] = vtail(tail, &v, acc[i], i, 0, m0);
    }
    UNROLL for (int i = 0; i < R; ++i) if (i < mr)
        _mm512_mask_storeu_ps(c + i * ldc, m0, acc[i]);
}

/* kcs: NULL (every segment kc steps) or each segment's steps; inlined into each caller, so
 * that a literal NULL leaves no test in the loops (a narrow 24-row tile ran ~7% slower) */
static inline __attribute__((always_inline)) void
narrow_segments(int64_t ntaps, int64_t rstride, int64_t kc, const int64_t *kcs,
                const float *const *rows, int64_t ks, const float *bp, float *c, int64_t ldc,
                int mr, int nr, int load, const gemm_tail *tail)
{
#define NARROW(MR_, NR_, LOAD_, R_, H_) \
    narrow_body(ntaps, rstride, kc, kcs, rows, ks, bp, c, ldc, MR_, NR_, LOAD_, R_, H_, tail)
#define ROWS(R_, H_) case R_: NARROW(R_, nr, load, R_, H_); break;
#define TILES(H_)                                                                            \
    switch (mr) { /* a shorter tile: only its rows computed */                               \
        ROWS(1, H_) ROWS(2, H_) ROWS(3, H_) ROWS(4, H_) ROWS(5, H_) ROWS(6, H_) ROWS(7, H_)  \
        ROWS(8, H_) ROWS(9, H_) ROWS(10, H_) ROWS(11, H_) ROWS(12, H_) ROWS(13, H_)         \
        ROWS(14, H_) ROWS(15, H_) ROWS(16, H_) ROWS(17, H_) ROWS(18, H_) ROWS(19, H_)       \
        ROWS(20, H_) ROWS(21, H_) ROWS(22, H_) ROWS(23, H_)                                 \
    default:                                                                                 \
        NARROW(mr, nr, load, MR_NARROW, H_);                                                 \
    }
    if (mr == MR_NARROW && nr == GEMM_NR_NARROW) {
        if (load)
            NARROW(MR_NARROW, GEMM_NR_NARROW, 1, MR_NARROW, 0);
        else
            NARROW(MR_NARROW, GEMM_NR_NARROW, 0, MR_NARROW, 0);
    } else if (nr <= 8) { /* the columns in a ymm register */
        TILES(1)
    } else {
        TILES(0)
    }
#undef TILES
#undef ROWS
#undef NARROW
}

static void gemm_narrow_taps_tail_avx512(int64_t ntaps, int64_t rstride, int64_t kc,
                                         const float *const *rows, int64_t ks,
                                         const float *bp, float *c, int64_t ldc, int mr,
                                         int nr, int load, const gemm_tail *tail)
{
    narrow_segments(ntaps, rstride, kc, NULL, rows, ks, bp, c, ldc, mr, nr, load, tail);
}

static void gemm_narrow_segs_avx512(int64_t nseg, int64_t rstride, const int64_t *kcs,
                                    const float *const *rows, int64_t ks, const float *bp,
                                    float *c, int64_t ldc, int mr, int nr, int load)
{
    narrow_segments(nseg, rstride, 0, kcs, rows, ks, bp, c, ldc, mr, nr, load, NULL);
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
                                               gemm_micro_taps_avx512,
                                               gemm_micro_segs_avx512,
                                               gemm_narrow_segs_avx512,
                                               1};

MG_TARGET_END
#endif

/* AVX-512 (F, BW, VL, DQ) + FMA vector helpers of the run kernels (bn_runs_template.h),
 * shared by bn_isa_avx512.c and bn_isa_avx512_bf16.c. Include after a target pragma that
 * enables these extensions. Each including file defines cvt_bf16 (float32 -> bfloat16 bits)
 * itself, then BN_AVX512_BF16_STORES. */
#ifndef MINIGRAPH_BN_AVX512_OPS_H
#define MINIGRAPH_BN_AVX512_OPS_H

#include <immintrin.h>
#include <stdint.h>

#define VLEN 16
typedef __m512 vf;

#define vf_zero _mm512_setzero_ps
#define vf_set1 _mm512_set1_ps
#define vf_add _mm512_add_ps
#define vf_sub _mm512_sub_ps
#define vf_mul _mm512_mul_ps
#define vf_fma _mm512_fmadd_ps
#define vf_ldk _mm512_loadu_ps
#define vf_stk _mm512_storeu_ps
#define vf_hsum _mm512_reduce_add_ps
#define BN_HSUM_BATCH 16

static inline __mmask16 lanes(int n) { return (__mmask16)((1u << n) - 1u); }
static inline void vf_acc(float *p, vf v)
{
    _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), v));
}
static inline void vf_acc_fma(float *p, vf u, vf v)
{
    _mm512_storeu_ps(p, _mm512_fmadd_ps(u, v, _mm512_loadu_ps(p)));
}
static inline vf vf_keep(vf v, int n) { return n == VLEN ? v : _mm512_maskz_mov_ps(lanes(n), v); }
/* lanes < n from a, the others from b (0 < n < VLEN) */
static inline vf vf_split(vf a, vf b, int n) { return _mm512_mask_blend_ps(lanes(n), b, a); }
/* Relu as mg_relu: v > 0 or NaN ? v : +0 */
static inline vf vf_relu(vf v)
{
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_NLE_UQ), v);
}
/* ReluGrad as mg_relu_grad: y > 0 ? g : g * 0 */
static inline vf vf_relu_grad(vf g, vf y)
{
    return _mm512_mask_mov_ps(_mm512_mul_ps(g, _mm512_setzero_ps()),
                              _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_GT_OQ), g);
}

/* out[k] = vf_hsum(v[k]) for k < count <= 16, bit for bit: _mm512_reduce_add_ps adds
 * hi256 + lo256 (T3[j] = a[j+8] + a[j]), then hi128 + lo128 of that (T6[k] = T3[k+4] + T3[k]),
 * then T8 = (T6[0] + T6[2], T6[1] + T6[3]), then T8[0] + T8[1]. Sixteen vectors take the
 * same additions in four steps, each step one addition per pair of vectors after two
 * shuffles that bring the pair's halves together: 15 additions and 32 shuffles for 16 sums
 * instead of 16 dependent chains of 8 operations (the per-plane reduction was half of the
 * statistics of 7x7 planes). Fewer than 16: one at a time. */
static inline void vf_hsum_batch(const vf *v, int count, float *out)
{
    if (count < 16) {
        for (int k = 0; k < count; ++k)
            out[k] = _mm512_reduce_add_ps(v[k]);
        return;
    }
    __m512 w[8], x[4], y[2];
    for (int k = 0; k < 8; ++k) /* [T3(v[2k]) | T3(v[2k+1])] */
        w[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0xee),
                             _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], 0x44));
    for (int m = 0; m < 4; ++m) /* quarter q: T6(v[4m + q]) */
        x[m] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * m], w[2 * m + 1], 0xdd),
                             _mm512_shuffle_f32x4(w[2 * m], w[2 * m + 1], 0x88));
    for (int m = 0; m < 2; ++m) /* quarter q: T8(x[2m] quarter q), T8(x[2m+1] quarter q) */
        y[m] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * m], x[2 * m + 1], 0x44),
                             _mm512_shuffle_ps(x[2 * m], x[2 * m + 1], 0xee));
    /* lane 4q + r: the sum of v[4r + q]; permuted to lane 4r + q */
    const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], 0x88),
                                   _mm512_shuffle_ps(y[0], y[1], 0xdd));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(idx, z));
}

static inline vf ld_f32(const float *p, int n)
{
    return n == VLEN ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(lanes(n), p);
}
static inline void st_f32(float *p, vf v, int n)
{
    if (n == VLEN)
        _mm512_storeu_ps(p, v);
    else
        _mm512_mask_storeu_ps(p, lanes(n), v);
}
static inline void st_f32_nt(float *p, vf v) { _mm512_stream_ps(p, v); }
static inline void vf_fence(void) { _mm_sfence(); }

static inline __m256i ld_u16(const uint16_t *p, int n)
{
    if (n == VLEN)
        return _mm256_loadu_si256((const __m256i *)p);
    return _mm256_maskz_loadu_epi16(lanes(n), p);
}
static inline void st_u16(uint16_t *p, __m256i h, int n)
{
    if (n == VLEN)
        _mm256_storeu_si256((__m256i *)p, h);
    else
        _mm256_mask_storeu_epi16(p, lanes(n), h);
}

static inline void st_u16_nt(uint16_t *p, __m256i h) { _mm256_stream_si256((__m256i *)p, h); }

static inline vf ld_f16(const uint16_t *p, int n) { return _mm512_cvtph_ps(ld_u16(p, n)); }
static inline __m256i cvt_f16(vf v)
{
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
static inline void st_f16(uint16_t *p, vf v, int n) { st_u16(p, cvt_f16(v), n); }
static inline void st_f16_nt(uint16_t *p, vf v) { st_u16_nt(p, cvt_f16(v)); }

/* st_bf16 and st_bf16_nt from the including file's cvt_bf16 */
#define BN_AVX512_BF16_STORES                                                       \
    static inline void st_bf16(uint16_t *p, vf v, int n) { st_u16(p, cvt_bf16(v), n); } \
    static inline void st_bf16_nt(uint16_t *p, vf v) { st_u16_nt(p, cvt_bf16(v)); }

static inline vf ld_bf16(const uint16_t *p, int n)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(ld_u16(p, n)), 16));
}
/* float32 -> bfloat16 bits, round to nearest even with integer ops; NaN -> quiet NaN with
 * the sign (as bn_convert.h). Exact for every input, subnormals included. */
static inline __m256i bf16_exact_bits(vf v)
{
    const __m512i u = _mm512_castps_si512(v);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i bias =
        _mm512_add_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    const __m512i sign = _mm512_and_si512(hi, _mm512_set1_epi32(0x8000));
    const __m512i qnan = _mm512_or_si512(sign, _mm512_set1_epi32(0x7fc0));
    r = _mm512_mask_mov_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), qnan);
    return _mm512_cvtepi32_epi16(r);
}

#endif

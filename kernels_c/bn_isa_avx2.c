/* AVX2 + FMA + F16C run kernels: 8 floats per vector. Partial vectors (row tails) go through
 * a small zero-filled buffer. Compiled for these extensions with a target pragma and only
 * called when the runtime (mg_runtime.c) found them (run_table in batch_norm.c). */
#include "bn_internal.h"

#if MG_X86
#include <immintrin.h>
#include <string.h>

MG_TARGET_AVX2_BEGIN

#define VLEN 8
typedef __m256 vf;

#define vf_zero _mm256_setzero_ps
#define vf_set1 _mm256_set1_ps
#define vf_add _mm256_add_ps
#define vf_sub _mm256_sub_ps
#define vf_mul _mm256_mul_ps
#define vf_fma _mm256_fmadd_ps
#define vf_ldk _mm256_loadu_ps
#define vf_stk _mm256_storeu_ps

static inline void vf_acc(float *p, vf v)
{
    _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), v));
}
static inline void vf_acc_fma(float *p, vf u, vf v)
{
    _mm256_storeu_ps(p, _mm256_fmadd_ps(u, v, _mm256_loadu_ps(p)));
}

static inline float vf_hsum(vf v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

#define BN_HSUM_BATCH 1
static inline void vf_hsum_batch(const vf *v, int count, float *out)
{
    for (int k = 0; k < count; ++k)
        out[k] = vf_hsum(v[k]);
}

static inline vf vf_keep(vf v, int n)
{
    if (n == VLEN)
        return v;
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes)));
}

/* lanes < n from a, the others from b (0 < n < VLEN) */
static inline vf vf_split(vf a, vf b, int n)
{
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_blendv_ps(b, a, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lanes)));
}

/* Relu as mg_relu: v > 0 or NaN ? v : +0 */
static inline vf vf_relu(vf v)
{
    return _mm256_and_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NLE_UQ), v);
}
/* ReluGrad as mg_relu_grad: y > 0 ? g : g * 0 */
static inline vf vf_relu_grad(vf g, vf y)
{
    return _mm256_blendv_ps(_mm256_mul_ps(g, _mm256_setzero_ps()), g,
                            _mm256_cmp_ps(y, _mm256_setzero_ps(), _CMP_GT_OQ));
}

static inline vf f32_full(const float *p) { return _mm256_loadu_ps(p); }
static inline vf f16_full(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline vf bf16_full(const uint16_t *p)
{
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static inline __m128i f16_bits(vf v)
{
    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* float32 -> bfloat16, round to nearest even; NaN -> quiet NaN with the sign (as bn_convert.h) */
static inline __m128i bf16_bits(vf v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i hi = _mm256_srli_epi32(u, 16);
    const __m256i bias =
        _mm256_add_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
    const __m256i sign = _mm256_and_si256(hi, _mm256_set1_epi32(0x8000));
    const __m256i qnan = _mm256_or_si256(sign, _mm256_set1_epi32(0x7fc0));
    const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    r = _mm256_blendv_epi8(r, qnan, is_nan);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

static inline void f32_put(float *p, vf v) { _mm256_storeu_ps(p, v); }
static inline void f16_put(uint16_t *p, vf v) { _mm_storeu_si128((__m128i *)p, f16_bits(v)); }
static inline void bf16_put(uint16_t *p, vf v) { _mm_storeu_si128((__m128i *)p, bf16_bits(v)); }

/* non-temporal stores of whole, aligned vectors */
static inline void st_f32_nt(float *p, vf v) { _mm256_stream_ps(p, v); }
static inline void st_f16_nt(uint16_t *p, vf v) { _mm_stream_si128((__m128i *)p, f16_bits(v)); }
static inline void st_bf16_nt(uint16_t *p, vf v) { _mm_stream_si128((__m128i *)p, bf16_bits(v)); }
static inline void vf_fence(void) { _mm_sfence(); }

/* n < VLEN: go through a zero-filled buffer so nothing past the run is touched */
#define BN_AVX2_LOAD_STORE(dt, T)                                                   \
    static inline vf ld_##dt(const T *p, int n)                                     \
    {                                                                               \
        if (n == VLEN)                                                              \
            return dt##_full(p);                                                    \
        T buf[VLEN] = {0};                                                          \
        memcpy(buf, p, (size_t)n * sizeof(T));                                      \
        return dt##_full(buf);                                                      \
    }                                                                               \
    static inline void st_##dt(T *p, vf v, int n)                                   \
    {                                                                               \
        if (n == VLEN) {                                                            \
            dt##_put(p, v);                                                         \
            return;                                                                 \
        }                                                                           \
        T buf[VLEN];                                                                \
        dt##_put(buf, v);                                                           \
        memcpy(p, buf, (size_t)n * sizeof(T));                                      \
    }
BN_AVX2_LOAD_STORE(f32, float)
BN_AVX2_LOAD_STORE(f16, uint16_t)
BN_AVX2_LOAD_STORE(bf16, uint16_t)

#define BN_ISA avx2
#include "bn_instantiate_dtypes.h"

MG_TARGET_END
#endif

/* AVX2 + FMA depthwise loops: depthwise_template.h with 8-float vectors (masked loads and
 * stores for the last channels) and 6-pixel tiles. Compiled for these extensions and
 * used only when the runtime's ISA is AVX2 (mg_isa_pick in depthwise.c). */
#include "depthwise_internal.h"

#if MG_X86
#include <immintrin.h>

MG_TARGET_AVX2_BEGIN

#define MG_ISA_NAME avx2
#define DW_LANES 8
#define DW_TILE 6

typedef __m256 dw_vec;

/* lanes 0 .. lanes - 1 set */
static inline __m256i dw_mask(int lanes)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline dw_vec dw_zero(void) { return _mm256_setzero_ps(); }
static inline dw_vec dw_load(const float *p, int lanes)
{
    return lanes == DW_LANES ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, dw_mask(lanes));
}
static inline void dw_store(float *p, dw_vec v, int lanes)
{
    if (lanes == DW_LANES)
        _mm256_storeu_ps(p, v);
    else
        _mm256_maskstore_ps(p, dw_mask(lanes), v);
}
static inline dw_vec dw_fma(dw_vec a, dw_vec b, dw_vec acc) { return _mm256_fmadd_ps(a, b, acc); }

#include "depthwise_template.h"

MG_TARGET_END
#endif

/* AVX-512 depthwise loops: depthwise_template.h with 16-float vectors (masked loads and
 * stores for the last channels) and 8-pixel tiles. Compiled for these extensions and
 * used only when the runtime's ISA is AVX-512 (mg_isa_pick in depthwise.c). */
#include "depthwise_internal.h"

#if MG_X86
#include <immintrin.h>

MG_TARGET_AVX512_BEGIN

#define MG_ISA_NAME avx512
#define DW_LANES 16
#define DW_TILE 8

typedef __m512 dw_vec;

static inline __mmask16 dw_mask(int lanes) { return (__mmask16)((1u << lanes) - 1u); }
static inline dw_vec dw_zero(void) { return _mm512_setzero_ps(); }
static inline dw_vec dw_load(const float *p, int lanes)
{
    return lanes == DW_LANES ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(dw_mask(lanes), p);
}
static inline void dw_store(float *p, dw_vec v, int lanes)
{
    if (lanes == DW_LANES)
        _mm512_storeu_ps(p, v);
    else
        _mm512_mask_storeu_ps(p, dw_mask(lanes), v);
}
static inline dw_vec dw_fma(dw_vec a, dw_vec b, dw_vec acc) { return _mm512_fmadd_ps(a, b, acc); }

#include "depthwise_template.h"

MG_TARGET_END
#endif

/* AVX-512 run kernels for bfloat16 storage on CPUs with AVX512-BF16: the float32 ->
 * bfloat16 store is one vcvtneps2bf16 (round to nearest even) instead of the ten integer
 * operations of bn_isa_avx512.c, which bound the writing runs (bfloat16 inference forward
 * ran ~30% slower than float16's vcvtps2ph). vcvtneps2bf16 flushes subnormal inputs to zero
 * and keeps NaN payloads, so lanes holding those take the exact integer rounding instead:
 * the bits stored are the same as bn_isa_avx512.c's. Runs that only write store unchecked
 * first and run again checked only if some lane needed it (BN_DEFERRED_STORES, below). Used
 * only after
 * __builtin_cpu_supports("avx512bf16") said yes (batch_norm.c). */
#include "bn_internal.h"

#if MG_X86
#include <immintrin.h>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")

#include "bn_avx512_ops.h"

enum { BN_FPCLASS_NAN_OR_SUBNORMAL = 0x01 | 0x20 | 0x80 }; /* QNaN, denormal, SNaN */

static inline __m256i cvt_bf16(vf v)
{
    __m256i h = (__m256i)_mm512_cvtneps_pbh(v);
    const __mmask16 special = _mm512_fpclass_ps_mask(v, BN_FPCLASS_NAN_OR_SUBNORMAL);
    if (special)
        h = _mm256_mask_mov_epi16(h, special, bf16_exact_bits(v));
    return h;
}
BN_AVX512_BF16_STORES

/* The unchecked store and the lanes it gets wrong, for the write-only runs' first try
 * (bn_runs_template.h's BN_DEFERRED_STORES) */
#define BN_DEFERRED_STORES 1
typedef unsigned bn_special_mask; /* a general register: or (a korw chain ran slower on Zen 4) */
static inline bn_special_mask bn_special(bn_special_mask m, vf v, int n)
{
    return m | _mm512_mask_fpclass_ps_mask(lanes(n), v, BN_FPCLASS_NAN_OR_SUBNORMAL);
}
static inline void st_bf16_fast(uint16_t *p, vf v, int n)
{
    st_u16(p, (__m256i)_mm512_cvtneps_pbh(v), n);
}
static inline void st_bf16_fast_nt(uint16_t *p, vf v)
{
    st_u16_nt(p, (__m256i)_mm512_cvtneps_pbh(v));
}

#define BN_ISA avx512bf16
#define BN_DT bf16
#define BN_T uint16_t
#include "bn_runs_template.h"

#pragma GCC pop_options
#endif

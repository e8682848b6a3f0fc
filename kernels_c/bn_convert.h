/* Portable float16 / bfloat16 <-> float32 conversions (bit exact, round to nearest even).
 * Used by the scalar kernels and by the vector kernels' tails where no masked load exists.
 * Results match numpy's astype(float16) and ml_dtypes' astype(bfloat16) (NaNs stay NaN:
 * float16 keeps the payload's top bits and sets the quiet bit; bfloat16 gives the canonical
 * quiet NaN with the input's sign, as ml_dtypes does). Requires the default rounding mode. */
#ifndef MINIGRAPH_BN_CONVERT_H
#define MINIGRAPH_BN_CONVERT_H

#include <stdint.h>
#include <string.h>

static inline float bn_bits_to_f32(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint32_t bn_f32_to_bits(float f)
{
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    return bits;
}

static inline float bn_bf16_to_f32(uint16_t h) { return bn_bits_to_f32((uint32_t)h << 16); }

static inline uint16_t bn_f32_to_bf16(float f)
{
    const uint32_t u = bn_f32_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN */
        return (uint16_t)(((u >> 16) & 0x8000u) | 0x7fc0u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float bn_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
    if (exponent == 0x1f) /* inf / NaN */
        return bn_bits_to_f32(sign | 0x7f800000u | (mantissa << 13));
    if (exponent == 0) { /* zero / subnormal: mantissa * 2^-24, exact in float32 */
        const float magnitude = (float)mantissa * 0x1p-24f;
        return sign ? -magnitude : magnitude;
    }
    return bn_bits_to_f32(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

static inline uint16_t bn_f32_to_f16(float f)
{
    const uint32_t u = bn_f32_to_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t au = u & 0x7fffffffu;
    if (au > 0x7f800000u) /* NaN: keep the payload's top bits, make it quiet */
        return (uint16_t)(sign | 0x7e00u | ((au >> 13) & 0x3ffu));
    if (au >= 0x477ff000u) /* >= 65520 rounds to infinity (and infinity itself) */
        return (uint16_t)(sign | 0x7c00u);
    if (au >= 0x38800000u) /* normal half (>= 2^-14): round mantissa bit 13, rebias 127 -> 15 */
        return (uint16_t)(sign | ((au + 0xfffu + ((au >> 13) & 1u) - 0x38000000u) >> 13));
    /* subnormal half or zero: adding 0.5 rounds |f| to a multiple of 2^-24 (to nearest even) */
    const float rounded = bn_bits_to_f32(au) + 0.5f;
    return (uint16_t)(sign | (bn_f32_to_bits(rounded) - 0x3f000000u));
}

#endif

/* Vectorizable float32 exponentials for the activation loops (activations_template.h):
 * branch-free, no calls, no float -> int conversions, so GCC vectorizes a loop that uses them
 * for the ISA being compiled (AVX-512, AVX2 or the baseline) and every lane rounds alike.
 *
 *   mgf_exp(x)         e^x, x in [-inf, inf]: subnormal results included (0 below e^-104,
 *                      inf above e^89); NaN stays NaN
 *   mgf_expm1_neg(x)   e^x - 1 for x <= 0 (a positive x is taken as 0), without the
 *                      cancellation of e^x - 1 near 0; NaN stays NaN
 *   mgf_log1p_unit(e)  log(1 + e) for e in [0, 1]
 *   mgf_log_ge1(s)     log(s) for s >= 1 (inf and NaN stay): s = 2^k m, m in [1, 2),
 *                      k ln2 (ln2 in head and tail) + log1p_unit(m - 1), m - 1 exact
 *
 * The method (Cody & Waite, "Software Manual for the Elementary Functions", 1980; the same
 * reduction as fdlibm's expf/expm1f): x = n ln2 + r with n = round(x / ln2) and
 * |r| <= ln2 / 2, ln2 split in a 16-bit head (n * head is exact for |n| < 256) and a tail;
 * e^r - 1 = r + r^2 (1/2! + r/3! + ... + r^6/8!), Taylor to degree 8 (truncation below
 * 2^-32 relative); then e^x = 2^n (1 + (e^r - 1)) and e^x - 1 = 2^n (e^r - 1) + (2^n - 1),
 * each rounded once at the end. log(1 + e) = 2 atanh(s) with s = e / (2 + e) <= 1/3:
 * 2s (1 + s^2/3 + s^4/5 + ... + s^16/17), truncation below 2^-29 relative.
 *
 * Accuracy (tests/test_activation_ops.py measures it over all float32 inputs in steps):
 * each function is within 1.5 ulp of the exact value; the activations built on them stay
 * within the bounds activations.h states. Included inside a family's ISA region, with
 * fp-contract off (no fused multiply-adds), so every ISA computes the same bits.
 */
#ifndef MINIGRAPH_MG_MATHF_H
#define MINIGRAPH_MG_MATHF_H

#include <stdint.h>

#include "bn_convert.h" /* bn_bits_to_f32, bn_f32_to_bits: the float <-> bits casts */


/* 2^k as a float, for k in [-126, 127] (built from its exponent bits) */
static inline float mgf_pow2(int32_t k)
{
    return bn_bits_to_f32((uint32_t)(k + 127) << 23);
}

/* n = round(x / ln2) and *r = x - n ln2, for |x| <= 150: n from the low bits of
 * x * log2(e) + 1.5 * 2^23 (adding the magic number rounds to an integer), so no float ->
 * int conversion sees a NaN (a NaN x gives some n and a NaN r). */
static inline int32_t mgf_reduce(float x, float *r)
{
    const float magic = 0x1.8p23f;
    const float t = x * 0x1.715476p+0f + magic;
    const float n = t - magic;
    *r = (x - n * 0x1.62e4p-1f) - n * 0x1.7f7d1cp-20f; /* ln2 = head + tail */
    return (int32_t)(bn_f32_to_bits(t) - bn_f32_to_bits(magic));
}

/* e^r - 1 for |r| <= ln2 / 2 (exact for r = 0 and tiny r) */
static inline float mgf_expm1_poly(float r)
{
    float q = 0x1.a01a02p-16f;         /* 1/8! */
    q = q * r + 0x1.a01a02p-13f;       /* 1/7! */
    q = q * r + 0x1.6c16c2p-10f;       /* 1/6! */
    q = q * r + 0x1.111112p-7f;        /* 1/5! */
    q = q * r + 0x1.555556p-5f;        /* 1/4! */
    q = q * r + 0x1.555556p-3f;        /* 1/3! */
    q = q * r + 0.5f;                  /* 1/2! */
    return r + (r * r) * q;
}

static inline float mgf_exp(float x)
{
    x = x < -104.0f ? -104.0f : x; /* comparisons keep a NaN */
    x = x > 89.0f ? 89.0f : x;
    float r;
    const int32_t n = mgf_reduce(x, &r);
    const float p = 1.0f + mgf_expm1_poly(r);
    /* 2^n in two factors, each a normal float for n in [-150, 128]: p * 2^n1 is exact, the
     * last product rounds once (into the subnormals, or to inf) */
    const int32_t n1 = n >> 1;
    return p * mgf_pow2(n1) * mgf_pow2(n - n1);
}

static inline float mgf_expm1_neg(float x)
{
    x = x < -30.0f ? -30.0f : x; /* e^-30 - 1 rounds to -1 */
    x = x > 0.0f ? 0.0f : x;
    float r;
    const int32_t n = mgf_reduce(x, &r);
    const float q = mgf_expm1_poly(r), t = mgf_pow2(n);
    return t * q + (t - 1.0f); /* n = 0: q itself; t - 1 is exact for n >= -24 */
}

static inline float mgf_log1p_unit(float e)
{
    const float s = e / (2.0f + e), z = s * s, s2 = s + s;
    float p = 0x1.e1e1e2p-5f;          /* 1/17 */
    p = p * z + 0x1.111112p-4f;        /* 1/15 */
    p = p * z + 0x1.3b13b2p-4f;        /* 1/13 */
    p = p * z + 0x1.745d18p-4f;        /* 1/11 */
    p = p * z + 0x1.c71c72p-4f;        /* 1/9 */
    p = p * z + 0x1.24924ap-3f;        /* 1/7 */
    p = p * z + 0x1.99999ap-3f;        /* 1/5 */
    p = p * z + 0x1.555556p-2f;        /* 1/3 */
    return s2 + s2 * (z * p);
}

static inline float mgf_log_ge1(float s)
{
    if (!(s <= 0x1.fffffep127f)) /* inf, NaN */
        return s;
    const uint32_t bits = bn_f32_to_bits(s);
    const float k = (float)((int32_t)(bits >> 23) - 127);
    const float m = bn_bits_to_f32((bits & 0x7fffffu) | 0x3f800000u);
    return k * 0x1.62e4p-1f + (k * 0x1.7f7d1cp-20f + mgf_log1p_unit(m - 1.0f));
}

/* The activations built on them (activations_internal.h's list) */

/* 1 / (1 + e^-x): with e = e^-|x| <= 1, 1 / (1 + e) for x >= 0 and e / (1 + e) below, so
 * no term overflows and tiny results keep their digits (subnormals included) */
static inline float mgf_sigmoid(float x)
{
    const float e = mgf_exp(-__builtin_fabsf(x));
    return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

/* tanh |x| from a = -2|x|: -(e^a - 1) / (2 + (e^a - 1)) for |x| < 0.55 (no cancellation near
 * 0), 1 - 2 e^a / (1 + e^a) above (the small term rounded, not the result); the sign of x,
 * -0 and NaN included */
static inline float mgf_tanh(float x)
{
    float a = -2.0f * __builtin_fabsf(x);
    a = a < -30.0f ? -30.0f : a; /* tanh(15) rounds to 1 */
    float r;
    const int32_t n = mgf_reduce(a, &r);
    const float q = mgf_expm1_poly(r), t = mgf_pow2(n);
    const float em = t * q + (t - 1.0f), e = t + t * q; /* e^a - 1 and e^a */
    const int small = a > -1.1f;
    const float ratio = (small ? -em : e + e) / (small ? 2.0f + em : 1.0f + e);
    return __builtin_copysignf(small ? ratio : 1.0f - ratio, x);
}

/* log(1 + e^x) = max(x, 0) + log(1 + e^-|x|): exact-ish for large |x| of either sign, +inf
 * for +inf, 0 for -inf, NaN for NaN */
static inline float mgf_softplus(float x)
{
    return (x > 0.0f ? x : 0.0f) + mgf_log1p_unit(mgf_exp(-__builtin_fabsf(x)));
}

#endif

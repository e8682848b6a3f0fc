/* gemm_tail_tile: a GEMM tile's epilogue (gemm_internal.h's gemm_tail) on the stored tile,
 * for the micro-kernels that do not apply it in registers (AVX2, baseline). Each stage
 * rounds as the unfused epilogue's stage does (activations_template.h, the relu expressions
 * of activations_internal.h): + bias, MG_AFFINE(y - mean, k, offset) (one fused
 * multiply-add where the ISA has FMA), + residual, then Relu or Relu6; no contraction of
 * the separate operations (fp-contract=off), so bit for bit mg_channel_epilogue.
 *
 * No include guard on purpose: a per-ISA file includes it after its target pragma (MG_AFFINE
 * follows the ISA being compiled, as mg_affine.h says). */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#include "mg_affine.h"

static inline void gemm_tail_tile(const gemm_tail *t, float *c, int64_t ldc, int mr, int nr)
{
    for (int i = 0; i < mr; ++i) {
        float *y = c + i * ldc;
        const float *z = t->residual ? t->residual + i * t->ldr : NULL;
        for (int j = 0; j < nr; ++j) {
            float v = y[j];
            if (t->bias)
                v += t->bias[j];
            if (t->mean)
                v = MG_AFFINE(v - t->mean[j], t->k[j], t->offset[j]);
            if (z)
                v += z[j];
            if (t->activation == 1)
                v = (v > 0.0f || v != v) ? v : 0.0f;
            else if (t->activation == 2)
                v = v > 0.0f ? (v < 6.0f ? v : 6.0f) : (v != v ? v : 0.0f);
            y[j] = v;
        }
    }
}
#pragma GCC pop_options

/* AVX-512 (F, BW, VL, DQ) + FMA run kernels: 16 floats per vector, masked loads/stores for
 * row tails (helpers: bn_avx512_ops.h). float16 uses the AVX-512F vcvtph2ps/vcvtps2ph
 * conversions; bfloat16 is widened by a shift and rounded to nearest even with integer ops
 * (exact, NaN-safe, subnormals kept; CPUs with AVX512-BF16 store bfloat16 with
 * bn_isa_avx512_bf16.c instead, same bits). Compiled for these extensions with a target
 * pragma and only called when the runtime (mg_runtime.c) found them (batch_norm.c). */
#include "bn_internal.h"

#if MG_X86
#include <immintrin.h>

MG_TARGET_AVX512_BEGIN

#include "bn_avx512_ops.h"

static inline __m256i cvt_bf16(vf v) { return bf16_exact_bits(v); }
BN_AVX512_BF16_STORES

#define BN_ISA avx512
#include "bn_instantiate_dtypes.h"

MG_TARGET_END
#endif

/* AVX2 pooling: pooling_template.h's loops compiled for AVX2 + FMA. Used only when the
 * runtime's ISA is AVX2 (mg_isa_pick in pooling.c). */
#include "pooling_internal.h"

#if MG_X86
MG_TARGET_AVX2_BEGIN

#define MG_ISA_NAME avx2
#include "pooling_template.h"

MG_TARGET_END
#endif

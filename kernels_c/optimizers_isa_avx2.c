/* AVX2 + FMA optimizers: optimizers_template.h's loops compiled for AVX2 + FMA (no FMA contraction:
 * see the template). Used only when the runtime's ISA is AVX2 + FMA (mg_isa_pick in
 * optimizers.c). */
#include "optimizers_internal.h"

#if MG_X86
MG_TARGET_AVX2_BEGIN

#define MG_ISA_NAME avx2
#include "optimizers_template.h"

MG_TARGET_END
#endif

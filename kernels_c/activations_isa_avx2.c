/* AVX2 + FMA activations: activations_template.h's loops compiled for AVX2 + FMA. Used
 * only when the runtime's ISA is AVX2 + FMA (mg_isa_pick in activations.c). */
#include "activations_internal.h"

#if MG_X86
MG_TARGET_AVX2_BEGIN

#define MG_ISA_NAME avx2
#include "activations_template.h"

MG_TARGET_END
#endif

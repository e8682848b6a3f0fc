/* AVX-512 activations: activations_template.h's loops compiled for AVX-512. Used
 * only when the runtime's ISA is AVX-512 (mg_isa_pick in activations.c). */
#include "activations_internal.h"

#if MG_X86
MG_TARGET_AVX512_BEGIN

#define MG_ISA_NAME avx512
#include "activations_template.h"

MG_TARGET_END
#endif

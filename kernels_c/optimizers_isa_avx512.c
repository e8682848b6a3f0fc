/* AVX-512 optimizers: optimizers_template.h's loops compiled for AVX-512 (no FMA contraction:
 * see the template). Used only when the runtime's ISA is AVX-512 (mg_isa_pick in
 * optimizers.c). */
#include "optimizers_internal.h"

#if MG_X86
MG_TARGET_AVX512_BEGIN

#define MG_ISA_NAME avx512
#include "optimizers_template.h"

MG_TARGET_END
#endif

/* AVX-512 broadcasting binary ops: broadcast_template.h's loops compiled for AVX-512 (no FMA
 * contraction). Used only when the runtime's ISA is AVX-512 (mg_isa_pick in broadcast.c). */
#include "broadcast_internal.h"

#if MG_X86
MG_TARGET_AVX512_BEGIN

#define MG_ISA_NAME avx512
#include "broadcast_template.h"

MG_TARGET_END
#endif

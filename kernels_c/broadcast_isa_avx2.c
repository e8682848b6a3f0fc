/* AVX2 broadcasting binary ops: broadcast_template.h's loops compiled for AVX2 (no FMA
 * contraction). Used only when the runtime's ISA is AVX2 + FMA (mg_isa_pick in
 * broadcast.c). */
#include "broadcast_internal.h"

#if MG_X86
MG_TARGET_AVX2_BEGIN

#define MG_ISA_NAME avx2
#include "broadcast_template.h"

MG_TARGET_END
#endif

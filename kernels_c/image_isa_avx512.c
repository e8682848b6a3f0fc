/* AVX-512 image kernels: image_template.h's loops compiled for AVX-512 (no FMA
 * contraction). Used only when the runtime's ISA is AVX-512 (mg_isa_pick in image.c). */
#include "image_internal.h"

#if MG_X86
MG_TARGET_AVX512_BEGIN

#define MG_ISA_NAME avx512
#include "image_template.h"

MG_TARGET_END
#endif

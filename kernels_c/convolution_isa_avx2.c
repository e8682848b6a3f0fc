/* AVX2 + FMA convolution micro-kernels: convolution_template.h with 8-float vectors and 6
 * pixels or rows per tile (12 ymm accumulators). Compiled for these extensions and used only
 * when the runtime's ISA is AVX2 (mg_isa_pick in convolution.c). */
#include <string.h>

#include "convolution_internal.h"

#if MG_X86
MG_TARGET_AVX2_BEGIN

#define MG_ISA_NAME avx2
#define VW 8
#define TP 6
#define TR 6
#include "convolution_template.h"

MG_TARGET_END
#endif

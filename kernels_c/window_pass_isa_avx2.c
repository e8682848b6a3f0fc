/* AVX2 window-pass rows: window_pass_template.h compiled for AVX2. */
#include "window_pass_internal.h"

#if MG_X86
MG_TARGET_AVX2_BEGIN

#define MG_ISA_NAME avx2
#include "window_pass_template.h"

MG_TARGET_END
#endif

/* AVX512 window-pass rows: window_pass_template.h compiled for AVX512. */
#include "window_pass_internal.h"

#if MG_X86
MG_TARGET_AVX512_BEGIN

#define MG_ISA_NAME avx512
#include "window_pass_template.h"

MG_TARGET_END
#endif

/* AVX2 + FMA convolution micro-kernels: the portable ones (conv_vec_template.h) with 8-float
 * vectors and 6 pixels or rows per tile (12 ymm accumulators). Compiled for these extensions
 * with a target pragma and only called when mg_isa() says AVX2 (conv.c). */
#include <string.h>

#include "conv_internal.h"

#if MG_X86
#pragma GCC push_options
#pragma GCC target("avx2,fma")

#define VW 8
#define TP 6
#define TR 6
#define TABLE nn_conv_avx2
#define FN(name) name##_avx2
#include "conv_vec_template.h"

#pragma GCC pop_options
#endif

/* Baseline convolution micro-kernels (any CPU): convolution_template.h with 4-float vectors
 * and 3 pixels or rows per tile. Used when the runtime's ISA is scalar (mg_isa_pick in
 * convolution.c). */
#include <string.h>

#include "convolution_internal.h"

#define MG_ISA_NAME scalar
#define VW 4
#define TP 3
#define TR 3
#include "convolution_template.h"

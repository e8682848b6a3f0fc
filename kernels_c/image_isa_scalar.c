/* Scalar image kernels: image_template.h's loops for the baseline ISA (also the fallback on
 * CPUs other than x86). */
#include "image_internal.h"

#define MG_ISA_NAME scalar
#include "image_template.h"

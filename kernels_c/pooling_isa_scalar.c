/* Baseline pooling (any CPU): pooling_template.h's loops. Used when the runtime's ISA is
 * scalar (mg_isa_pick in pooling.c). */
#include "pooling_internal.h"

#define MG_ISA_NAME scalar
#include "pooling_template.h"

/* Baseline activations (any CPU): activations_template.h's loops. Used when the runtime's
 * ISA is scalar (mg_isa_pick in activations.c). */
#include "activations_internal.h"

#define MG_ISA_NAME scalar
#include "activations_template.h"

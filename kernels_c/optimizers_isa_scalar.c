/* Baseline optimizers (any CPU): optimizers_template.h's loops. Used when the runtime's ISA
 * is scalar (mg_isa_pick in optimizers.c). */
#include "optimizers_internal.h"

#define MG_ISA_NAME scalar
#include "optimizers_template.h"

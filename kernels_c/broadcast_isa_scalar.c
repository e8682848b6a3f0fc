/* Baseline broadcasting binary ops (any CPU): broadcast_template.h's loops. Used when the
 * runtime's ISA is scalar (mg_isa_pick in broadcast.c). */
#include "broadcast_internal.h"

#define MG_ISA_NAME scalar
#include "broadcast_template.h"

/* Baseline window-pass rows (any CPU): window_pass_template.h. */
#include "window_pass_internal.h"

#define MG_ISA_NAME scalar
#include "window_pass_template.h"

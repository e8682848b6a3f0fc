/* Baseline depthwise loops (any CPU): depthwise_template.h with one float per "vector" and
 * __builtin_fmaf (libm's correctly rounded fmaf where the CPU has no FMA), so the sums round
 * as on the SIMD ISAs. Used when the runtime's ISA is scalar (mg_isa_pick in depthwise.c). */
#include "depthwise_internal.h"

#define MG_ISA_NAME scalar
#define DW_LANES 1
#define DW_TILE 4

typedef float dw_vec;

static inline dw_vec dw_zero(void) { return 0.0f; }
static inline dw_vec dw_load(const float *p, int lanes) { (void)lanes; return *p; }
static inline void dw_store(float *p, dw_vec v, int lanes) { (void)lanes; *p = v; }
static inline dw_vec dw_fma(dw_vec a, dw_vec b, dw_vec acc) { return __builtin_fmaf(a, b, acc); }

#include "depthwise_template.h"

/* Instantiates bn_runs_template.h once per storage type (float32, float16, bfloat16) for the
 * ISA named by BN_ISA; each bn_isa_*.c defines BN_ISA and its load/store helpers first. */
#define BN_DT f32
#define BN_T float
#include "bn_runs_template.h"
#undef BN_DT
#undef BN_T
#define BN_DT f16
#define BN_T uint16_t
#include "bn_runs_template.h"
#undef BN_DT
#undef BN_T
#define BN_DT bf16
#define BN_T uint16_t
#include "bn_runs_template.h"
#undef BN_DT
#undef BN_T

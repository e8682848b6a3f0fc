/* Scalar run kernels (any CPU): vectors of one float. The fallback when neither AVX2+FMA+F16C
 * nor AVX-512 is available; also selectable with mg_set_isa for testing. */
#include "bn_convert.h"
#include "bn_internal.h"

#define VLEN 1
typedef float vf;

static inline vf vf_zero(void) { return 0.0f; }
static inline vf vf_set1(float a) { return a; }
static inline vf vf_add(vf a, vf b) { return a + b; }
static inline vf vf_sub(vf a, vf b) { return a - b; }
static inline vf vf_mul(vf a, vf b) { return a * b; }
static inline vf vf_fma(vf a, vf b, vf c) { return a * b + c; }
static inline vf vf_keep(vf v, int n) { (void)n; return v; }
static inline vf vf_split(vf a, vf b, int n) { return n > 0 ? a : b; } /* unused: VLEN 1 */
static inline vf vf_ldk(const float *p) { return *p; }
static inline void vf_stk(float *p, vf v) { *p = v; }
static inline float vf_hsum(vf v) { return v; }
#define BN_HSUM_BATCH 1
static inline void vf_hsum_batch(const vf *v, int count, float *out)
{
    for (int k = 0; k < count; ++k)
        out[k] = v[k];
}
static inline void vf_acc(float *p, vf v) { *p += v; }
static inline void vf_acc_fma(float *p, vf u, vf v) { *p = vf_fma(u, v, *p); }
static inline vf vf_relu(vf v) { return (v > 0.0f || v != v) ? v : 0.0f; } /* as mg_relu */
static inline vf vf_relu_grad(vf g, vf y) { return y > 0.0f ? g : g * 0.0f; } /* mg_relu_grad */

static inline vf ld_f32(const float *p, int n) { (void)n; return *p; }
static inline vf ld_f16(const uint16_t *p, int n) { (void)n; return bn_f16_to_f32(*p); }
static inline vf ld_bf16(const uint16_t *p, int n) { (void)n; return bn_bf16_to_f32(*p); }
static inline void st_f32(float *p, vf v, int n) { (void)n; *p = v; }
static inline void st_f16(uint16_t *p, vf v, int n) { (void)n; *p = bn_f32_to_f16(v); }
static inline void st_bf16(uint16_t *p, vf v, int n) { (void)n; *p = bn_f32_to_bf16(v); }
/* no non-temporal stores here: plain ones */
static inline void st_f32_nt(float *p, vf v) { st_f32(p, v, 1); }
static inline void st_f16_nt(uint16_t *p, vf v) { st_f16(p, v, 1); }
static inline void st_bf16_nt(uint16_t *p, vf v) { st_bf16(p, v, 1); }
static inline void vf_fence(void) {}

#define BN_ISA scalar
#include "bn_instantiate_dtypes.h"

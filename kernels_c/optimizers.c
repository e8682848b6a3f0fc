/* minigraph native optimizers (float32); see optimizers.h.
 *
 * Plain loops over the elements on the calling thread (optimizers_template.h, one table
 * per ISA picked once per call with mg_isa_pick).
 */
#include "optimizers.h"

#include "mg_runtime.h"
#include "optimizers_internal.h"

static const opt_kernel_table *opt_kernels(void)
{
    static const void *const tables[MG_NISA] =
        MG_ISA_TABLES(&opt_kernels_scalar, &opt_kernels_avx2, &opt_kernels_avx512);
    return mg_isa_pick(tables);
}

int mg_apply_adam(int64_t count, const float *var, const float *m, const float *v,
                  const float *grad, float lr_t, float beta1, float beta2, float epsilon,
                  int use_nesterov, float *var_out, float *m_out, float *v_out)
{
    if (count < 0 || (count && (!var || !m || !v || !grad || !var_out || !m_out || !v_out)))
        return MG_EINVAL;
    opt_kernels()->adam(var, m, v, grad, var_out, m_out, v_out, lr_t, beta1, beta2, epsilon,
                        use_nesterov, count);
    return MG_OK;
}

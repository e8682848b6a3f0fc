/* The optimizer loops, written once and instantiated per ISA by optimizers_isa_<isa>.c (the
 * compiler vectorizes them for the ISA's target).
 *
 * Needs: MG_ISA_NAME (the ISA's name token: defines opt_kernels_<isa>).
 */
#define FN(name) MG_ISA_FN(name)

/* no FMA contraction: every operation rounds to float32 as numpy's do (same results) */
static __attribute__((optimize("fp-contract=off"))) void
FN(adam)(const float *restrict var, const float *restrict m, const float *restrict v,
         const float *restrict grad, float *restrict var_out, float *restrict m_out,
         float *restrict v_out, float lr_t, float beta1, float beta2, float epsilon,
         int nesterov, int64_t n)
{
    const float omb1 = 1.0f - beta1, omb2 = 1.0f - beta2;
    if (nesterov) {
        for (int64_t i = 0; i < n; ++i) {
            const float gi = grad[i];
            const float mi = m[i] + (gi - m[i]) * omb1;
            const float vi = v[i] + (gi * gi - v[i]) * omb2;
            const float step = mi * beta1 + omb1 * gi;
            var_out[i] = var[i] - lr_t * step / (__builtin_sqrtf(vi) + epsilon);
            m_out[i] = mi;
            v_out[i] = vi;
        }
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        const float gi = grad[i];
        const float mi = m[i] + (gi - m[i]) * omb1;
        const float vi = v[i] + (gi * gi - v[i]) * omb2;
        var_out[i] = var[i] - lr_t * mi / (__builtin_sqrtf(vi) + epsilon);
        m_out[i] = mi;
        v_out[i] = vi;
    }
}

const opt_kernel_table MG_ISA_FN(opt_kernels) = {
    .adam = FN(adam),
};

#undef FN

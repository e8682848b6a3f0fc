/* The broadcasting binary loops, generated from the list in broadcast_internal.h and
 * instantiated per ISA by broadcast_isa_<isa>.c: three loops per op, each vectorized by the
 * compiler for the ISA's target, without FMA contraction (one rounding per element).
 *
 * Needs: MG_ISA_NAME (the ISA's name token: defines bc_kernels_<isa>).
 */
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off", "no-trapping-math") /* see activations_template.h */

#define BC_LOOPS(name, expr)                                                                \
    static void MG_ISA_FN(name##_vv)(const float *restrict xs, const float *restrict ys,   \
                                     float *restrict zs, int64_t n)                         \
    {                                                                                       \
        for (int64_t i = 0; i < n; ++i) {                                                   \
            const float a = xs[i], b = ys[i];                                               \
            zs[i] = (expr);                                                                 \
        }                                                                                   \
    }                                                                                       \
    static void MG_ISA_FN(name##_vs)(const float *restrict xs, const float *restrict ys,   \
                                     float *restrict zs, int64_t n)                         \
    {                                                                                       \
        const float b = ys[0];                                                              \
        for (int64_t i = 0; i < n; ++i) {                                                   \
            const float a = xs[i];                                                          \
            zs[i] = (expr);                                                                 \
        }                                                                                   \
    }                                                                                       \
    static void MG_ISA_FN(name##_sv)(const float *restrict xs, const float *restrict ys,   \
                                     float *restrict zs, int64_t n)                         \
    {                                                                                       \
        const float a = xs[0];                                                              \
        for (int64_t i = 0; i < n; ++i) {                                                   \
            const float b = ys[i];                                                          \
            zs[i] = (expr);                                                                 \
        }                                                                                   \
    }
MG_BROADCAST_OPS(BC_LOOPS)
#pragma GCC pop_options

#define BC_VV(name, expr) MG_ISA_FN(name##_vv),
#define BC_VS(name, expr) MG_ISA_FN(name##_vs),
#define BC_SV(name, expr) MG_ISA_FN(name##_sv),
const bc_kernel_table MG_ISA_FN(bc_kernels) = {
    .vv = {MG_BROADCAST_OPS(BC_VV)},
    .vs = {MG_BROADCAST_OPS(BC_VS)},
    .sv = {MG_BROADCAST_OPS(BC_SV)},
};

#undef BC_LOOPS
#undef BC_VV
#undef BC_VS
#undef BC_SV

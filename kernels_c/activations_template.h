/* The activation loops, generated from the list in activations_internal.h and instantiated
 * per ISA by activations_isa_<isa>.c: each expression becomes a loop the compiler
 * vectorizes for the ISA's target (AVX-512, AVX2 or the baseline), tails included.
 *
 * Needs: MG_ISA_NAME (the ISA's name token: defines act_kernels_<isa>).
 */
#define ACT_UNARY_LOOP(name, expr)                                                          \
    static void MG_ISA_FN(name)(const float *restrict xs, float *restrict ys, int64_t n)   \
    {                                                                                       \
        for (int64_t i = 0; i < n; ++i) {                                                   \
            const float x = xs[i];                                                          \
            ys[i] = (expr);                                                                 \
        }                                                                                   \
    }
#define ACT_BINARY_LOOP(name, expr)                                                         \
    static void MG_ISA_FN(name)(const float *restrict gs, const float *restrict xs,        \
                                float *restrict dx, int64_t n)                              \
    {                                                                                       \
        for (int64_t i = 0; i < n; ++i) {                                                   \
            const float g = gs[i], x = xs[i];                                               \
            dx[i] = (expr);                                                                 \
        }                                                                                   \
    }
MG_UNARY_ACTIVATIONS(ACT_UNARY_LOOP)
MG_BINARY_ACTIVATIONS(ACT_BINARY_LOOP)

#define ACT_ENTRY(name, expr) MG_ISA_FN(name),
const act_kernel_table MG_ISA_FN(act_kernels) = {
    .unary = {MG_UNARY_ACTIVATIONS(ACT_ENTRY)},
    .binary = {MG_BINARY_ACTIVATIONS(ACT_ENTRY)},
};

#undef ACT_UNARY_LOOP
#undef ACT_BINARY_LOOP
#undef ACT_ENTRY

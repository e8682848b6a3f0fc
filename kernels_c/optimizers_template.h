/* The training-step loops, written once and instantiated per ISA by optimizers_isa_<isa>.c
 * (the compiler vectorizes them for the ISA's target). Formulas: optimizers.h.
 *
 * Needs: MG_ISA_NAME (the ISA's name token: defines opt_kernels_<isa>).
 */
#define FN(name) MG_ISA_FN(name)

/* no FMA contraction: every operation rounds to float32 as numpy's and TF's do */
#define OPT_EXACT __attribute__((optimize("fp-contract=off")))

static OPT_EXACT void FN(gradient_descent)(const opt_args *p, int64_t lo, int64_t hi)
{
    const float *var = p->var, *delta = p->grad;
    float *out = p->var_out;
    const float alpha = p->lr;
    for (int64_t i = lo; i < hi; ++i)
        out[i] = var[i] - alpha * delta[i];
}

static OPT_EXACT void FN(momentum)(const opt_args *p, int64_t lo, int64_t hi)
{
    const float *var = p->var, *accum = p->a, *grad = p->grad;
    float *var_out = p->var_out, *accum_out = p->a_out;
    const float lr = p->lr, mom = p->c1;
    if (p->nesterov) {
        for (int64_t i = lo; i < hi; ++i) {
            const float gi = grad[i], ai = accum[i] * mom + gi;
            var_out[i] = var[i] - (gi * lr + ai * mom * lr);
            accum_out[i] = ai;
        }
        return;
    }
    for (int64_t i = lo; i < hi; ++i) {
        const float ai = accum[i] * mom + grad[i];
        var_out[i] = var[i] - lr * ai;
        accum_out[i] = ai;
    }
}

/* One Adam element; `step` is m' (or its Nesterov form) */
#define ADAM_ELEMENT(step_expr)                                                          \
    do {                                                                                 \
        const float gi = grad[i];                                                        \
        const float mi = m[i] + (gi - m[i]) * omb1;                                      \
        const float vi = v[i] + (gi * gi - v[i]) * omb2;                                 \
        const float step = (step_expr);                                                  \
        var_out[i] = var[i] - lr_t * step / (__builtin_sqrtf(vi) + epsilon);             \
        m_out[i] = mi;                                                                   \
        v_out[i] = vi;                                                                   \
    } while (0)

/* Each loop is vectorized (GCC did not: the pairs of arrays it would have to check for
 * overlap at run time are too many for it, so each element paid a scalar sqrt and divide):
 * ivdep states what optimizers.h requires of the callers, that an output is a new buffer or
 * the very input it replaces, so no element depends on another's store; each vector lane
 * rounds as the scalar code does (IEEE sqrt and division, no contraction). */
static OPT_EXACT void FN(adam)(const opt_args *p, int64_t lo, int64_t hi)
{
    const float *var = p->var, *m = p->a, *v = p->b, *grad = p->grad;
    float *var_out = p->var_out, *m_out = p->a_out, *v_out = p->b_out;
    const float lr_t = p->lr, beta1 = p->c1, epsilon = p->epsilon;
    const float omb1 = 1.0f - p->c1, omb2 = 1.0f - p->c2;
    if (p->nesterov) {
#pragma GCC ivdep
        for (int64_t i = lo; i < hi; ++i)
            ADAM_ELEMENT(mi * beta1 + omb1 * gi);
        return;
    }
#pragma GCC ivdep
    for (int64_t i = lo; i < hi; ++i)
        ADAM_ELEMENT(mi);
}
#undef ADAM_ELEMENT

/* y[lo, hi) = x[0] + x[1] + ... in input order, a block of 1024 elements at a time (the
 * partial sums stay in cache while each next input is added) */
static void FN(add_n)(int n, const float *const *x, float *y, int64_t lo, int64_t hi)
{
    for (int64_t start = lo; start < hi; start += 1024) {
        const int64_t end = hi - start < 1024 ? hi : start + 1024;
        const float *x0 = x[0];
        if (n == 1) {
            for (int64_t i = start; i < end; ++i)
                y[i] = x0[i];
            continue;
        }
        const float *x1 = x[1];
        for (int64_t i = start; i < end; ++i)
            y[i] = x0[i] + x1[i];
        for (int k = 2; k < n; ++k) {
            const float *xk = x[k];
            for (int64_t i = start; i < end; ++i)
                y[i] += xk[i];
        }
    }
}

const opt_kernel_table MG_ISA_FN(opt_kernels) = {
    .gradient_descent = FN(gradient_descent),
    .momentum = FN(momentum),
    .adam = FN(adam),
    .add_n = FN(add_n),
};

#undef OPT_EXACT
#undef FN

/* minigraph native training-step kernels (float32); see optimizers.h.
 *
 * Each entry checks its arguments, picks the ISA's table once (mg_isa_pick) and hands
 * chunks of whole cache lines (16 floats) to the worker pool (mg_pool_rows): elementwise
 * work, so any split gives the same bits.
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

typedef struct {
    opt_update_fn fn;
    opt_args args;
} update_call;

static void update_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const update_call *c = ctx;
    c->fn(&c->args, lo, hi);
}

static int run_update(opt_update_fn fn, const opt_args *args, int64_t count, int num_threads)
{
    update_call c = {fn, *args};
    mg_pool_rows(mg_stream_threads(num_threads, count), count, 16, update_chunk, &c);
    return MG_OK;
}

int mg_apply_gradient_descent(int64_t count, const float *var, const float *delta,
                              float alpha, float *var_out, int num_threads)
{
    if (count < 0 || (count && (!var || !delta || !var_out)))
        return MG_EINVAL;
    const opt_args a = {.var = var, .grad = delta, .var_out = var_out, .lr = alpha};
    return run_update(opt_kernels()->gradient_descent, &a, count, num_threads);
}

int mg_apply_momentum(int64_t count, const float *var, const float *accum, const float *grad,
                      float lr, float momentum, int use_nesterov, float *var_out,
                      float *accum_out, int num_threads)
{
    if (count < 0 || (count && (!var || !accum || !grad || !var_out || !accum_out)))
        return MG_EINVAL;
    const opt_args a = {.var = var, .a = accum, .grad = grad, .var_out = var_out,
                        .a_out = accum_out, .lr = lr, .c1 = momentum,
                        .nesterov = use_nesterov != 0};
    return run_update(opt_kernels()->momentum, &a, count, num_threads);
}

int mg_apply_adam(int64_t count, const float *var, const float *m, const float *v,
                  const float *grad, float lr_t, float beta1, float beta2, float epsilon,
                  int use_nesterov, float *var_out, float *m_out, float *v_out,
                  int num_threads)
{
    if (count < 0 || (count && (!var || !m || !v || !grad || !var_out || !m_out || !v_out)))
        return MG_EINVAL;
    const opt_args a = {.var = var, .a = m, .b = v, .grad = grad, .var_out = var_out,
                        .a_out = m_out, .b_out = v_out, .lr = lr_t, .c1 = beta1, .c2 = beta2,
                        .epsilon = epsilon, .nesterov = use_nesterov != 0};
    return run_update(opt_kernels()->adam, &a, count, num_threads);
}

typedef struct {
    opt_add_n_fn fn;
    int n;
    const float *const *x;
    float *y;
} add_n_call;

static void add_n_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const add_n_call *c = ctx;
    c->fn(c->n, c->x, c->y, lo, hi);
}

int mg_add_n(int64_t count, int n, const float *const *x, float *y, int num_threads)
{
    if (count < 0 || n < 1 || (count && (!x || !y)))
        return MG_EINVAL;
    for (int k = 0; count && k < n; ++k)
        if (!x[k])
            return MG_EINVAL;
    add_n_call c = {opt_kernels()->add_n, n, x, y};
    mg_pool_rows(mg_stream_threads(num_threads, count * n), count, 16, add_n_chunk, &c);
    return MG_OK;
}

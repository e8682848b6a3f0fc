/* minigraph native training-step kernels (float32); see optimizers.h.
 *
 * Each entry checks its arguments, picks the ISA's table once (mg_isa_pick) and hands
 * chunks of whole cache lines (16 floats) to the worker pool (mg_pool_rows): elementwise
 * work, so any split gives the same bits.
 */
#include "optimizers.h"

#include <stdlib.h>

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

/* ------------------------------------------------------------------------------------------ */
/* Every variable of a step in one call                                                        */

typedef struct {
    opt_update_fn fn;
    int n;
    const opt_args *args;   /* [n] */
    const int64_t *start;   /* [n + 1]: variable k holds elements [start[k], start[k + 1]) */
} list_call;

/* Elements [lo, hi) of the variables laid end to end: each variable's part with its own
 * arguments (the first variable by binary search, then the next ones in order). */
static void list_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const list_call *c = ctx;
    int k0 = 0, k1 = c->n;
    while (k1 - k0 > 1) {
        const int mid = (k0 + k1) / 2;
        if (c->start[mid] <= lo)
            k0 = mid;
        else
            k1 = mid;
    }
    for (int k = k0; k < c->n && c->start[k] < hi; ++k) {
        const int64_t a = lo > c->start[k] ? lo : c->start[k];
        const int64_t b = hi < c->start[k + 1] ? hi : c->start[k + 1];
        if (a < b)
            c->fn(&c->args[k], a - c->start[k], b - c->start[k]);
    }
}

int mg_apply_update_list(int kind, int n, const int64_t *counts, const float *const *var,
                         const float *const *a, const float *const *b,
                         const float *const *grad, float *const *var_out, float *const *a_out,
                         float *const *b_out, const float *lr, const float *c1,
                         const float *c2, const float *epsilon, int use_nesterov,
                         int num_threads)
{
    const opt_kernel_table *t = opt_kernels();
    const opt_update_fn fns[3] = {t->gradient_descent, t->momentum, t->adam};
    const int reads_a = kind >= MG_UPDATE_MOMENTUM, reads_b = kind == MG_UPDATE_ADAM;
    if (kind < MG_UPDATE_GRADIENT_DESCENT || kind > MG_UPDATE_ADAM || n < 0 ||
        (n && (!counts || !var || !grad || !var_out || !lr)) ||
        (n && reads_a && (!a || !a_out || !c1)) ||
        (n && reads_b && (!b || !b_out || !c2 || !epsilon)))
        return MG_EINVAL;
    opt_args *args = malloc((size_t)(n ? n : 1) * sizeof *args);
    int64_t *start = malloc((size_t)(n + 1) * sizeof *start);
    if (!args || !start) {
        free(args);
        free(start);
        return MG_ENOMEM;
    }
    start[0] = 0;
    int rc = MG_OK;
    for (int k = 0; k < n && rc == MG_OK; ++k) {
        const int64_t count = counts[k];
        if (count < 0 || (count && (!var[k] || !grad[k] || !var_out[k] ||
                                    (reads_a && (!a[k] || !a_out[k])) ||
                                    (reads_b && (!b[k] || !b_out[k])))))
            rc = MG_EINVAL;
        start[k + 1] = start[k] + count;
        args[k] = (opt_args){.var = var[k], .grad = grad[k], .var_out = var_out[k],
                             .lr = lr[k], .nesterov = use_nesterov != 0};
        if (reads_a) {
            args[k].a = a[k];
            args[k].a_out = a_out[k];
            args[k].c1 = c1[k];
        }
        if (reads_b) {
            args[k].b = b[k];
            args[k].b_out = b_out[k];
            args[k].c2 = c2[k];
            args[k].epsilon = epsilon[k];
        }
    }
    if (rc == MG_OK && n) {
        list_call c = {fns[kind], n, args, start};
        mg_pool_rows(mg_stream_threads(num_threads, start[n]), start[n], 16, list_chunk, &c);
    }
    free(args);
    free(start);
    return rc;
}

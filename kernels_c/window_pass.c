/* minigraph native window sums along one axis: see window_pass.h. Rows of the result
 * ([outer][len] of them, `inner` floats each) go to the worker pool; a row is +0 plus its
 * source rows, one loop over `inner` per addition (compiled per ISA and picked with
 * mg_isa_pick: window_pass_internal.h). */
#include "window_pass.h"

#include <string.h>

#include "window_pass_internal.h"

typedef struct {
    int64_t n, inner, k, s, b, out;
    const float *src;
    float *dst;
    int spread;
    void (*add_row)(float *acc, const float *src, int64_t n);
} pass_call;

static void pass_rows(void *ctx, int64_t lo, int64_t hi)
{
    const pass_call *pc = ctx;
    const int64_t len = pc->spread ? pc->n : pc->out, from = pc->spread ? pc->out : pc->n;
    for (int64_t row = lo; row < hi; ++row) {
        const int64_t o = row / len, q = row % len;
        float *acc = pc->dst + row * pc->inner;
        const float *src = pc->src + o * from * pc->inner;
        for (int64_t j = 0; j < pc->inner; ++j)
            acc[j] = 0.0f;
        if (!pc->spread) { /* output q: inputs q*s - b + i, i ascending */
            for (int64_t i = 0; i < pc->k; ++i) {
                const int64_t r = q * pc->s - pc->b + i;
                if (r >= 0 && r < pc->n)
                    pc->add_row(acc, src + r * pc->inner, pc->inner);
            }
        } else { /* input q: outputs p with q = p*s - b + i, p descending */
            const int64_t top = (q + pc->b) / pc->s; /* the largest p with p*s - b <= q */
            for (int64_t p = top < pc->out - 1 ? top : pc->out - 1; p >= 0; --p) {
                if (q - (p * pc->s - pc->b) >= pc->k)
                    break;
                pc->add_row(acc, src + p * pc->inner, pc->inner);
            }
        }
    }
}

static int run_pass(int64_t outer, int64_t n, int64_t inner, int64_t k, int64_t stride,
                    int64_t before, int64_t out, const float *src, float *dst, int spread,
                    int num_threads)
{
    if (outer < 0 || n < 0 || inner < 0 || k < 1 || stride < 1 || before < 0 || out < 0)
        return MG_EINVAL;
    const int64_t rows = outer * (spread ? n : out);
    if (!rows || !inner)
        return MG_OK;
    if (!dst || (outer * (spread ? out : n) * inner != 0 && !src))
        return MG_EINVAL;
    static const void *const tables[MG_NISA] = MG_ISA_TABLES(
        &window_pass_kernels_scalar, &window_pass_kernels_avx2, &window_pass_kernels_avx512);
    const window_pass_table *t = mg_isa_pick(tables);
    pass_call pc = {n, inner, k, stride, before, out, src, dst, spread, t->add_row};
    mg_pool_rows(mg_stream_threads(num_threads, rows * inner * (k < 8 ? k : 8)), rows, 1,
                 pass_rows, &pc);
    return MG_OK;
}

int mg_window_sum(int64_t outer, int64_t n, int64_t inner, int64_t k, int64_t stride,
                  int64_t before, int64_t out, const float *x, float *y, int num_threads)
{
    return run_pass(outer, n, inner, k, stride, before, out, x, y, 0, num_threads);
}

int mg_window_spread(int64_t outer, int64_t n, int64_t inner, int64_t k, int64_t stride,
                     int64_t before, int64_t out, const float *g, float *dx, int num_threads)
{
    return run_pass(outer, n, inner, k, stride, before, out, g, dx, 1, num_threads);
}

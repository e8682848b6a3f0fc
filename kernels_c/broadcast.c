/* minigraph native broadcasting binary ops (float32); see broadcast.h.
 *
 * The entry point checks the shapes, derives each operand's element strides (0 along a
 * broadcast dimension), picks the ISA's table once (mg_isa_pick) and the innermost loop's
 * kind (vector-vector, vector-scalar, scalar-vector), then hands z's elements to the worker
 * pool (mg_pool_rows) in chunks of whole cache lines. A chunk walks its elements as runs
 * along the innermost dimension, carrying its index into the outer ones.
 */
#include "broadcast.h"

#include "broadcast_internal.h"
#include "mg_runtime.h"

static const bc_kernel_table *bc_kernels(void)
{
    static const void *const tables[MG_NISA] =
        MG_ISA_TABLES(&bc_kernels_scalar, &bc_kernels_avx2, &bc_kernels_avx512);
    return mg_isa_pick(tables);
}

int mg_broadcast_op_count(void)
{
    return BC_NOPS;
}

const char *mg_broadcast_op_name(int op)
{
#define BC_NAME(name, expr) #name,
    static const char *const names[BC_NOPS] = {MG_BROADCAST_OPS(BC_NAME)};
#undef BC_NAME
    return op >= 0 && op < BC_NOPS ? names[op] : NULL;
}

typedef struct {
    bc_fn fn; /* the innermost dimension's loop */
    int rank;
    int64_t dims[MG_BROADCAST_MAX_RANK];
    int64_t xs[MG_BROADCAST_MAX_RANK], ys[MG_BROADCAST_MAX_RANK]; /* element strides */
    const float *x, *y;
    float *z;
} bc_call;

/* z[lo, hi): runs along the innermost dimension, the index carried into the outer ones */
static void bc_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const bc_call *c = ctx;
    const int last = c->rank - 1;
    int64_t idx[MG_BROADCAST_MAX_RANK], rest = lo, xo = 0, yo = 0;
    for (int d = last; d >= 0; --d) {
        idx[d] = rest % c->dims[d];
        rest /= c->dims[d];
        xo += idx[d] * c->xs[d];
        yo += idx[d] * c->ys[d];
    }
    for (int64_t pos = lo; pos < hi;) {
        const int64_t left = c->dims[last] - idx[last];
        const int64_t n = left < hi - pos ? left : hi - pos;
        c->fn(c->x + xo, c->y + yo, c->z + pos, n);
        pos += n;
        idx[last] += n;
        xo += n * c->xs[last];
        yo += n * c->ys[last];
        for (int d = last; d > 0 && idx[d] == c->dims[d]; --d) {
            idx[d] = 0;
            xo += c->xs[d - 1] - c->dims[d] * c->xs[d];
            yo += c->ys[d - 1] - c->dims[d] * c->ys[d];
            ++idx[d - 1];
        }
    }
}

/* The element strides of a C-contiguous operand of shape `own` inside the broadcast `dims`
 * (0 along a dimension it is broadcast along) */
static void bc_strides(int rank, const int64_t *dims, const int64_t *own, int64_t *strides)
{
    int64_t size = 1;
    for (int d = rank - 1; d >= 0; --d) {
        strides[d] = own[d] == 1 && dims[d] != 1 ? 0 : size;
        size *= own[d];
    }
}

int mg_broadcast(int op, int rank, const int64_t *dims, const int64_t *x_dims,
                 const int64_t *y_dims, const float *x, const float *y, float *z,
                 int num_threads)
{
    if (op < 0 || op >= BC_NOPS || rank < 1 || rank > MG_BROADCAST_MAX_RANK || !dims ||
        !x_dims || !y_dims)
        return MG_EINVAL;
    int64_t count = 1;
    for (int d = 0; d < rank; ++d) {
        const int64_t n = dims[d], a = x_dims[d], b = y_dims[d];
        if (n < 0 || (a != n && a != 1) || (b != n && b != 1) || (a != n && b != n))
            return MG_EINVAL;
        if (n && count > INT64_MAX / n)
            return MG_EINVAL;
        count *= n;
    }
    if (count == 0)
        return MG_OK;
    if (!x || !y || !z)
        return MG_EINVAL;
    bc_call c = {.rank = rank, .x = x, .y = y, .z = z};
    for (int d = 0; d < rank; ++d)
        c.dims[d] = dims[d];
    bc_strides(rank, dims, x_dims, c.xs);
    bc_strides(rank, dims, y_dims, c.ys);
    const bc_kernel_table *t = bc_kernels();
    const int last = rank - 1;
    /* both strides 0 only where the dimension is 1 (dims[d] is one operand's) */
    c.fn = c.xs[last] == 0 ? t->sv[op] : c.ys[last] == 0 ? t->vs[op] : t->vv[op];
    mg_pool_rows(mg_stream_threads(num_threads, count), count, 16, bc_chunk, &c);
    return MG_OK;
}

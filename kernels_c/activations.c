/* minigraph native activations (float32, elementwise); see activations.h.
 *
 * One entry point per line of the list in activations_internal.h, all alike: check the
 * arguments, pick the ISA's table once (mg_isa_pick), hand chunks of whole cache lines to the
 * worker pool (mg_pool_rows) and run the ISA's loop (activations_template.h) on each.
 */
#include "activations.h"

#include <math.h>

#include "activations_internal.h"
#include "mg_runtime.h"


static const act_kernel_table *act_kernels(void)
{
    static const void *const tables[MG_NISA] =
        MG_ISA_TABLES(&act_kernels_scalar, &act_kernels_avx2, &act_kernels_avx512);
    return mg_isa_pick(tables);
}

/* An elementwise call's arguments, for the pool's chunks (whole cache lines of 16 floats,
 * so no two threads write one line) */
typedef struct {
    act_unary_fn unary;
    act_binary_fn binary;
    const float *g, *x;
    float *y;
    float a;
} elementwise_call;

static void elementwise_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const elementwise_call *c = ctx;
    if (c->unary)
        c->unary(c->x + lo, c->y + lo, hi - lo, c->a);
    else
        c->binary(c->g + lo, c->x + lo, c->y + lo, hi - lo);
}

static int run_unary(int op, int64_t count, const float *x, float *y, float a,
                     int num_threads)
{
    if (count < 0 || (count && (!x || !y)))
        return MG_EINVAL;
    elementwise_call c = {act_kernels()->unary[op], NULL, NULL, x, y, a};
    mg_pool_rows(mg_stream_threads(num_threads, count), count, 16, elementwise_chunk, &c);
    return MG_OK;
}

static int run_binary(int op, int64_t count, const float *g, const float *x, float *dx,
                      int num_threads)
{
    if (count < 0 || (count && (!g || !x || !dx)))
        return MG_EINVAL;
    elementwise_call c = {NULL, act_kernels()->binary[op], g, x, dx, 0.0f};
    mg_pool_rows(mg_stream_threads(num_threads, count), count, 16, elementwise_chunk, &c);
    return MG_OK;
}

/* Erf and Erfc: the C library's double-precision function of each element, rounded once
 * (activations.h). About 13 ns an element on one thread, so the pool takes any tensor past
 * ERROR_FUNCTION_PARALLEL elements, far below the streaming ops' threshold. */
enum { ERROR_FUNCTION_PARALLEL = 2048 };

typedef struct {
    double (*function)(double);
    const float *x;
    float *y;
} error_function_call;

static void error_function_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const error_function_call *c = ctx;
    for (int64_t i = lo; i < hi; ++i)
        c->y[i] = (float)c->function((double)c->x[i]);
}

static int run_error_function(double (*function)(double), int64_t count, const float *x,
                              float *y, int num_threads)
{
    if (count < 0 || (count && (!x || !y)))
        return MG_EINVAL;
    error_function_call c = {function, x, y};
    const int threads = count < ERROR_FUNCTION_PARALLEL ? 1 : mg_native_threads(num_threads);
    mg_pool_rows(threads, count, 16, error_function_chunk, &c);
    return MG_OK;
}

int mg_erf(int64_t count, const float *x, float *y, int num_threads)
{
    return run_error_function(erf, count, x, y, num_threads);
}

int mg_erfc(int64_t count, const float *x, float *y, int num_threads)
{
    return run_error_function(erfc, count, x, y, num_threads);
}

#define ACT_UNARY_ENTRY(name, expr)                                                         \
    int mg_##name(int64_t count, const float *x, float *y, int num_threads)                \
    {                                                                                       \
        return run_unary(ACT_##name, count, x, y, 0.0f, num_threads);                       \
    }
#define ACT_SCALED_ENTRY(name, expr)                                                        \
    int mg_##name(int64_t count, const float *x, float *y, float a, int num_threads)       \
    {                                                                                       \
        return run_unary(ACT_##name, count, x, y, a, num_threads);                          \
    }
#define ACT_BINARY_ENTRY(name, expr)                                                        \
    int mg_##name(int64_t count, const float *g, const float *features, float *dx,         \
                  int num_threads)                                                          \
    {                                                                                       \
        return run_binary(ACT_##name, count, g, features, dx, num_threads);                 \
    }
MG_UNARY_ACTIVATIONS(ACT_UNARY_ENTRY)
MG_SCALED_ACTIVATIONS(ACT_SCALED_ENTRY)
MG_BINARY_ACTIVATIONS(ACT_BINARY_ENTRY)

enum { EPILOGUE_BLOCK_FLOATS = 4096 }; /* 16 KiB: a block stays in L1 through every stage */

static void epilogue_rows(const act_kernel_table *t, int64_t lo, int64_t hi, int64_t channels,
                          float *y, const mg_epilogue *e)
{
    const int64_t block = EPILOGUE_BLOCK_FLOATS / channels > 0 ? EPILOGUE_BLOCK_FLOATS / channels
                                                                : 1;
    for (int64_t r = lo; r < hi; r += block) {
        const int64_t rows = hi - r < block ? hi - r : block, start = r * channels;
        float *yb = y + start;
        if (e->bias)
            t->channel_add(yb, e->bias, rows, channels);
        if (e->mean)
            t->channel_affine(yb, e->mean, e->k, e->offset, rows, channels);
        if (e->residual)
            t->add(yb, e->residual + start, rows * channels);
        if (e->activation == 1)
            t->unary[ACT_relu](yb, yb, rows * channels, 0.0f);
        else if (e->activation == 2)
            t->unary[ACT_relu6](yb, yb, rows * channels, 0.0f);
    }
}

int mg_epilogue_check(const mg_epilogue *e)
{
    if (!e || (e->mean && (!e->k || !e->offset)) || (!e->mean && (e->k || e->offset)) ||
        e->activation < 0 || e->activation > 2)
        return MG_EINVAL;
    return MG_OK;
}

void mg_epilogue_tile(const mg_epilogue *e, float *y, int64_t ld, int64_t start, int64_t rows,
                      int64_t cols)
{
    const act_kernel_table *t = act_kernels();
    const int64_t ch0 = start % ld;
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t at = start + r * ld;
        float *yr = y + at;
        if (e->bias)
            t->channel_add(yr, e->bias + ch0, 1, cols);
        if (e->mean)
            t->channel_affine(yr, e->mean + ch0, e->k + ch0, e->offset + ch0, 1, cols);
        if (e->residual)
            t->add(yr, e->residual + at, cols);
        if (e->activation == 1)
            t->unary[ACT_relu](yr, yr, cols, 0.0f);
        else if (e->activation == 2)
            t->unary[ACT_relu6](yr, yr, cols, 0.0f);
    }
}

typedef struct {
    const act_kernel_table *t;
    int64_t channels;
    float *y;
    const mg_epilogue *e;
} epilogue_call;

static void epilogue_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const epilogue_call *c = ctx;
    epilogue_rows(c->t, lo, hi, c->channels, c->y, c->e);
}

int mg_channel_epilogue(int64_t rows, int64_t channels, float *y, const mg_epilogue *e,
                        int num_threads)
{
    if (rows < 0 || channels <= 0 || (rows && !y) || mg_epilogue_check(e) != MG_OK)
        return MG_EINVAL;
    epilogue_call c = {act_kernels(), channels, y, e};
    mg_pool_rows(mg_stream_threads(num_threads, rows * channels), rows, 1, epilogue_chunk, &c);
    return MG_OK;
}

enum { REDUCE_CHANNEL_BLOCK = 256 }; /* accumulators of one block stay in L1 */

/* output row o's channels [c0, c0 + n) */
static void reduce_block(const act_kernel_table *t, int64_t o, int64_t c0, int64_t n,
                         int64_t rows, int64_t channels, const float *x, float *y,
                         int64_t divisor)
{
    float acc[REDUCE_CHANNEL_BLOCK] = {0};
    t->rows_sum(acc, x + o * rows * channels + c0, rows, n, channels);
    float *out = y + o * channels + c0;
    /* numpy divides the float32 sum by the int64 count in double and rounds once: the
     * correctly rounded float32 quotient, for any count */
    for (int64_t c = 0; c < n; ++c)
        out[c] = divisor ? (float)((double)acc[c] / (double)divisor) : acc[c];
}

typedef struct {
    const act_kernel_table *t;
    int64_t blocks, rows, channels;
    const float *x;
    float *y;
    int64_t divisor;
} reduce_call;

static void reduce_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const reduce_call *c = ctx;
    for (int64_t item = lo; item < hi; ++item) {
        const int64_t o = item / c->blocks, c0 = item % c->blocks * REDUCE_CHANNEL_BLOCK;
        const int64_t n = c->channels - c0 < REDUCE_CHANNEL_BLOCK ? c->channels - c0
                                                                 : REDUCE_CHANNEL_BLOCK;
        reduce_block(c->t, o, c0, n, c->rows, c->channels, c->x, c->y, c->divisor);
    }
}

int mg_reduce_rows(int64_t outer, int64_t rows, int64_t channels, const float *x, float *y,
                   int64_t divisor, int num_threads)
{
    if (outer < 0 || rows < 0 || channels <= 0 || divisor < 0 || (outer && (!y || (rows && !x))))
        return MG_EINVAL;
    const int64_t blocks = (channels + REDUCE_CHANNEL_BLOCK - 1) / REDUCE_CHANNEL_BLOCK;
    reduce_call c = {act_kernels(), blocks, rows, channels, x, y, divisor};
    mg_pool_rows(mg_stream_threads(num_threads, outer * rows * channels), outer * blocks, 1,
                 reduce_chunk, &c);
    return MG_OK;
}

typedef struct {
    act_inner_sum_fn sum;
    int64_t n;
    const float *x;
    float *y;
    int64_t divisor;
} inner_call;

static void inner_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const inner_call *c = ctx;
    for (int64_t o = lo; o < hi; ++o) {
        const float s = c->sum(c->x + o * c->n, c->n);
        c->y[o] = c->divisor ? (float)((double)s / (double)c->divisor) : s;
    }
}

int mg_reduce_inner(int64_t outer, int64_t n, const float *x, float *y, int64_t divisor,
                    int num_threads)
{
    if (outer < 0 || n < 1 || divisor < 0 || (outer && (!x || !y)))
        return MG_EINVAL;
    inner_call c = {act_kernels()->inner_sum, n, x, y, divisor};
    mg_pool_rows(mg_stream_threads(num_threads, outer * n), outer, 1, inner_chunk, &c);
    return MG_OK;
}

typedef struct {
    act_xent_rows_fn fn;
    int64_t classes;
    const float *x, *labels;
    const int64_t *sparse;
    float *loss, *bp;
} xent_call;

static void xent_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const xent_call *c = ctx;
    c->fn(c->x, c->classes, c->labels, c->sparse, c->loss, c->bp, lo, hi);
}

int mg_softmax_xent(int64_t rows, int64_t classes, const float *x, const float *labels,
                    const int64_t *sparse, float *loss, float *backprop, int num_threads)
{
    if (rows < 0 || classes < 1 || (!labels == !sparse) ||
        (rows && (!x || !loss || !backprop)))
        return MG_EINVAL;
    for (int64_t r = 0; sparse && r < rows; ++r)
        if (sparse[r] < 0 || sparse[r] >= classes)
            return MG_EINVAL;
    xent_call c = {act_kernels()->xent_rows, classes, x, labels, sparse, loss, backprop};
    mg_pool_rows(mg_stream_threads(num_threads, rows * classes * 8), rows, 1, xent_chunk, &c);
    return MG_OK;
}

typedef struct {
    act_rows_sum_at_fn sum;
    int64_t blocks, rows, channels;
    const int64_t *outer_off, *row_off;
    const float *x;
    float *y;
    int64_t divisor;
} gather_call;

static void gather_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const gather_call *c = ctx;
    float acc[REDUCE_CHANNEL_BLOCK];
    for (int64_t item = lo; item < hi; ++item) {
        const int64_t o = item / c->blocks, c0 = item % c->blocks * REDUCE_CHANNEL_BLOCK;
        const int64_t n = c->channels - c0 < REDUCE_CHANNEL_BLOCK ? c->channels - c0
                                                                 : REDUCE_CHANNEL_BLOCK;
        for (int64_t k = 0; k < n; ++k)
            acc[k] = 0.0f;
        c->sum(acc, c->x + c->outer_off[o] + c0, c->row_off, c->rows, n);
        float *out = c->y + o * c->channels + c0;
        for (int64_t k = 0; k < n; ++k)
            out[k] = c->divisor ? (float)((double)acc[k] / (double)c->divisor) : acc[k];
    }
}

int mg_reduce_gather(int64_t outer, int64_t rows, int64_t channels, const int64_t *outer_off,
                     const int64_t *row_off, const float *x, float *y, int64_t divisor,
                     int num_threads)
{
    if (outer < 0 || rows < 0 || channels <= 0 || divisor < 0 ||
        (outer && (!y || !outer_off || (rows && (!x || !row_off)))))
        return MG_EINVAL;
    const int64_t blocks = (channels + REDUCE_CHANNEL_BLOCK - 1) / REDUCE_CHANNEL_BLOCK;
    gather_call c = {act_kernels()->rows_sum_at, blocks, rows, channels, outer_off, row_off,
                     x, y, divisor};
    mg_pool_rows(mg_stream_threads(num_threads, outer * rows * channels), outer * blocks, 1,
                 gather_chunk, &c);
    return MG_OK;
}

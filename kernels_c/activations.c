/* minigraph native activations (float32, elementwise); see activations.h.
 *
 * One entry point per line of the list in activations_internal.h, all alike: check the
 * arguments, pick the ISA's table once (mg_isa_pick), split the elements between threads in
 * chunks of whole cache lines and run the ISA's loop (activations_template.h) on each.
 */
#include "activations.h"

#include "activations_internal.h"
#include "mg_runtime.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static const act_kernel_table *act_kernels(void)
{
    static const void *const tables[MG_NISA] =
        MG_ISA_TABLES(&act_kernels_scalar, &act_kernels_avx2, &act_kernels_avx512);
    return mg_isa_pick(tables);
}

/* elements [lo, hi) of thread tid of nth: whole cache lines (16 floats) each */
static void chunk(int64_t count, int tid, int nth, int64_t *lo, int64_t *hi)
{
    const int64_t lines = (count + 15) / 16;
    mg_split(lines, tid, nth, lo, hi);
    *lo *= 16;
    *hi = *hi * 16 < count ? *hi * 16 : count;
}

static int run_unary(int op, int64_t count, const float *x, float *y, int num_threads)
{
    if (count < 0 || (count && (!x || !y)))
        return MG_EINVAL;
    const act_unary_fn fn = act_kernels()->unary[op];
    const int nt = mg_stream_threads(num_threads, count);
    if (nt <= 1) {
        fn(x, y, count);
        return MG_OK;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        chunk(count, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (hi > lo)
            fn(x + lo, y + lo, hi - lo);
    }
#endif
    return MG_OK;
}

static int run_binary(int op, int64_t count, const float *g, const float *x, float *dx,
                      int num_threads)
{
    if (count < 0 || (count && (!g || !x || !dx)))
        return MG_EINVAL;
    const act_binary_fn fn = act_kernels()->binary[op];
    const int nt = mg_stream_threads(num_threads, count);
    if (nt <= 1) {
        fn(g, x, dx, count);
        return MG_OK;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        chunk(count, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (hi > lo)
            fn(g + lo, x + lo, dx + lo, hi - lo);
    }
#endif
    return MG_OK;
}

#define ACT_UNARY_ENTRY(name, expr)                                                         \
    int mg_##name(int64_t count, const float *x, float *y, int num_threads)                \
    {                                                                                       \
        return run_unary(ACT_##name, count, x, y, num_threads);                             \
    }
#define ACT_BINARY_ENTRY(name, expr)                                                        \
    int mg_##name(int64_t count, const float *g, const float *features, float *dx,         \
                  int num_threads)                                                          \
    {                                                                                       \
        return run_binary(ACT_##name, count, g, features, dx, num_threads);                 \
    }
MG_UNARY_ACTIVATIONS(ACT_UNARY_ENTRY)
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
            t->unary[ACT_relu](yb, yb, rows * channels);
        else if (e->activation == 2)
            t->unary[ACT_relu6](yb, yb, rows * channels);
    }
}

int mg_epilogue_check(const mg_epilogue *e)
{
    if (!e || (e->mean && (!e->k || !e->offset)) || (!e->mean && (e->k || e->offset)) ||
        e->activation < 0 || e->activation > 2)
        return MG_EINVAL;
    return MG_OK;
}

int mg_channel_epilogue(int64_t rows, int64_t channels, float *y, const mg_epilogue *e,
                        int num_threads)
{
    if (rows < 0 || channels <= 0 || (rows && !y) || mg_epilogue_check(e) != MG_OK)
        return MG_EINVAL;
    const act_kernel_table *t = act_kernels();
    const int nt = mg_stream_threads(num_threads, rows * channels);
    if (nt <= 1) {
        epilogue_rows(t, 0, rows, channels, y, e);
        return MG_OK;
    }
#ifdef _OPENMP
#pragma omp parallel num_threads(nt)
    {
        int64_t lo, hi;
        mg_split(rows, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        if (hi > lo)
            epilogue_rows(t, lo, hi, channels, y, e);
    }
#endif
    return MG_OK;
}

enum { REDUCE_CHANNEL_BLOCK = 256 }; /* accumulators of one block stay in L1 */

/* output row o's channels [c0, c0 + n) */
static void reduce_block(const act_kernel_table *t, int64_t o, int64_t c0, int64_t n,
                         int64_t rows, int64_t channels, const float *x, float *y, int divide)
{
    float acc[REDUCE_CHANNEL_BLOCK] = {0};
    t->rows_sum(acc, x + o * rows * channels + c0, rows, n, channels);
    float *out = y + o * channels + c0;
    /* numpy divides the float32 sum by the int64 count in double and rounds once: the
     * correctly rounded float32 quotient, for any count */
    for (int64_t c = 0; c < n; ++c)
        out[c] = divide ? (float)((double)acc[c] / (double)rows) : acc[c];
}

int mg_reduce_rows(int64_t outer, int64_t rows, int64_t channels, const float *x, float *y,
                   int divide, int num_threads)
{
    if (outer < 0 || rows < 0 || channels <= 0 || (outer && (!y || (rows && !x))))
        return MG_EINVAL;
    const act_kernel_table *t = act_kernels();
    const int64_t blocks = (channels + REDUCE_CHANNEL_BLOCK - 1) / REDUCE_CHANNEL_BLOCK;
    const int64_t items = outer * blocks;
    const int nt = mg_stream_threads(num_threads, outer * rows * channels);
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1)
#endif
    for (int64_t item = 0; item < items; ++item) {
        const int64_t o = item / blocks, c0 = item % blocks * REDUCE_CHANNEL_BLOCK;
        const int64_t n = channels - c0 < REDUCE_CHANNEL_BLOCK ? channels - c0
                                                              : REDUCE_CHANNEL_BLOCK;
        reduce_block(t, o, c0, n, rows, channels, x, y, divide);
    }
    return MG_OK;
}

/* minigraph native layout kernels; see layout.h.
 *
 * Pad writes the output row by row (a row: the innermost dimension): a row inside the input's
 * window is its padding zeros, one memcpy of the input row, zeros again; a row outside it is
 * all zeros. Chunks of rows go to the worker pool, so each chunk writes a contiguous part of
 * y once (no zero-fill pass before the copy).
 *
 * Concat copies spans of output rows: a span [c0, c1) of row r takes its columns from the
 * inputs it overlaps (input i holds columns [start_i, start_i + w_i)), one memcpy each. A
 * row is one span when there are enough rows to share between the threads; with few rows
 * (joining along the first axes) each row is cut into several spans, so the threads still
 * get work. */
#include "layout.h"

#include <stdlib.h>
#include <string.h>

#include "mg_runtime.h"


enum { PAD_MAX_RANK = 8 };

typedef struct {
    int rank;
    int64_t in_dims[PAD_MAX_RANK], out_dims[PAD_MAX_RANK], before[PAD_MAX_RANK];
    const float *x;
    float *y;
} pad_call;

/* output rows [lo, hi): the row index is the output's index over all but the last dim */
static void pad_rows(const pad_call *k, int64_t lo, int64_t hi)
{
    const int last = k->rank - 1;
    const int64_t in_w = k->in_dims[last], out_w = k->out_dims[last], left = k->before[last];
    for (int64_t row = lo; row < hi; ++row) {
        float *out = k->y + row * out_w;
        int64_t rest = row, source = 0, stride = 1;
        int inside = 1;
        for (int d = last - 1; d >= 0; --d) { /* the row's coordinate per outer dimension */
            const int64_t coord = rest % k->out_dims[d] - k->before[d];
            rest /= k->out_dims[d];
            inside &= coord >= 0 && coord < k->in_dims[d];
            source += coord * stride;
            stride *= k->in_dims[d];
        }
        if (!inside || in_w == 0) {
            memset(out, 0, (size_t)out_w * sizeof(float));
            continue;
        }
        memset(out, 0, (size_t)left * sizeof(float));
        memcpy(out + left, k->x + source * in_w, (size_t)in_w * sizeof(float));
        memset(out + left + in_w, 0, (size_t)(out_w - left - in_w) * sizeof(float));
    }
}

static void pad_chunk(void *ctx, int64_t lo, int64_t hi)
{
    pad_rows(ctx, lo, hi);
}

int mg_pad(int rank, const int64_t *dims, const int64_t *before, const int64_t *after,
           const float *x, float *y, int num_threads)
{
    if (rank < 0 || rank > PAD_MAX_RANK || (rank && (!dims || !before || !after)))
        return MG_EINVAL;
    pad_call k = {.rank = rank, .x = x, .y = y};
    int64_t in_count = 1, out_count = 1;
    for (int d = 0; d < rank; ++d) {
        if (dims[d] < 0 || before[d] < 0 || after[d] < 0)
            return MG_EINVAL;
        k.in_dims[d] = dims[d];
        k.before[d] = before[d];
        k.out_dims[d] = dims[d] + before[d] + after[d];
        in_count *= dims[d];
        out_count *= k.out_dims[d];
    }
    if ((out_count && !y) || (in_count && !x))
        return MG_EINVAL;
    if (rank == 0) { /* a scalar: nothing to pad */
        y[0] = x[0];
        return MG_OK;
    }
    const int64_t row_len = k.out_dims[rank - 1];
    const int64_t rows = row_len ? out_count / row_len : 0;
    const int nt = mg_stream_threads(num_threads, out_count);
    mg_pool_rows(nt, rows, 1, pad_chunk, &k);
    return MG_OK;
}

/* ------------------------------------------------------------------------------ concat */

enum { CONCAT_MIN_SPAN = 4096 }; /* floats: below this, a span costs more to hand out */

typedef struct {
    int count;
    const int64_t *widths, *starts; /* starts[i]: input i's first column in an output row */
    const float *const *inputs;
    float *y;
    int64_t total, spans_per_row, span;
} concat_call;

static void concat_span(const concat_call *k, int64_t row, int64_t c0, int64_t c1)
{
    float *out = k->y + row * k->total;
    for (int i = 0; i < k->count && k->starts[i] < c1; ++i) {
        const int64_t lo = k->starts[i] > c0 ? k->starts[i] : c0;
        const int64_t end = k->starts[i] + k->widths[i];
        const int64_t hi = end < c1 ? end : c1;
        if (lo < hi)
            memcpy(out + lo, k->inputs[i] + row * k->widths[i] + (lo - k->starts[i]),
                   (size_t)(hi - lo) * sizeof(float));
    }
}

/* items [lo, hi): item = row * spans_per_row + the span's index in its row */
static void concat_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const concat_call *k = ctx;
    for (int64_t item = lo; item < hi; ++item) {
        const int64_t row = item / k->spans_per_row, c0 = item % k->spans_per_row * k->span;
        const int64_t c1 = c0 + k->span < k->total ? c0 + k->span : k->total;
        concat_span(k, row, c0, c1);
    }
}

int mg_concat(int64_t outer, int count, const int64_t *widths, const float *const *inputs,
              float *y, int num_threads)
{
    if (outer < 0 || count < 1 || !widths || !inputs)
        return MG_EINVAL;
    int64_t total = 0;
    for (int i = 0; i < count; ++i) {
        if (widths[i] < 0 || (outer && widths[i] && !inputs[i]))
            return MG_EINVAL;
        total += widths[i];
    }
    if (!outer || !total)
        return MG_OK;
    if (!y)
        return MG_EINVAL;
    int64_t *starts = malloc((size_t)count * sizeof(int64_t));
    if (!starts)
        return MG_ENOMEM;
    for (int i = 0; i < count; ++i)
        starts[i] = i ? starts[i - 1] + widths[i - 1] : 0;
    const int nt = mg_stream_threads(num_threads, outer * total);
    int64_t spans = 1; /* per row: enough items for ~4 per thread, none below the minimum */
    if (nt > 1 && outer < 4 * (int64_t)nt) {
        spans = (4 * (int64_t)nt + outer - 1) / outer;
        const int64_t most = (total + CONCAT_MIN_SPAN - 1) / CONCAT_MIN_SPAN;
        spans = spans < most ? spans : most;
    }
    concat_call k = {.count = count, .widths = widths, .starts = starts, .inputs = inputs,
                     .y = y, .total = total, .spans_per_row = spans,
                     .span = (total + spans - 1) / spans};
    mg_pool_rows(nt, outer * spans, 1, concat_chunk, &k);
    free(starts);
    return MG_OK;
}

/* Transpose: y's axes are x's permuted; y walks row by row (its last axis innermost) */
typedef struct {
    int rank;
    int64_t ydims[8], xstride[8]; /* y's dims; x's stride (elements) along each y axis */
    const float *x;
    float *y;
} transpose_call;

/* x's offset of the first element of y's row `row` (y's axes but the last) */
static int64_t transpose_base(const transpose_call *k, int64_t row)
{
    int64_t base = 0;
    for (int d = k->rank - 2; d >= 0; --d) {
        base += (row % k->ydims[d]) * k->xstride[d];
        row /= k->ydims[d];
    }
    return base;
}

static void transpose_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const transpose_call *k = ctx;
    const int64_t n = k->ydims[k->rank - 1], step = k->xstride[k->rank - 1];
    for (int64_t row = lo; row < hi; ++row) {
        const float *restrict src = k->x + transpose_base(k, row);
        float *restrict dst = k->y + row * n;
        for (int64_t i = 0; i < n; ++i)
            dst[i] = src[i * step];
    }
}

int mg_transpose(int rank, const int64_t *dims, const int *perm, const float *x, float *y,
                 int num_threads)
{
    if (rank < 1 || rank > 8 || !dims || !perm)
        return MG_EINVAL;
    transpose_call k = {.rank = rank, .x = x, .y = y};
    int64_t stride[8], count = 1;
    int seen = 0;
    for (int d = rank - 1; d >= 0; --d) {
        if (dims[d] < 0 || (dims[d] && count > INT64_MAX / dims[d]))
            return MG_EINVAL;
        stride[d] = count;
        count *= dims[d];
    }
    for (int d = 0; d < rank; ++d) {
        if (perm[d] < 0 || perm[d] >= rank || (seen >> perm[d]) & 1)
            return MG_EINVAL;
        seen |= 1 << perm[d];
        k.ydims[d] = dims[perm[d]];
        k.xstride[d] = stride[perm[d]];
    }
    if (count == 0)
        return MG_OK;
    if (!x || !y)
        return MG_EINVAL;
    mg_pool_rows(mg_stream_threads(num_threads, count), count / k.ydims[rank - 1], 1,
                 transpose_chunk, &k);
    return MG_OK;
}

/* Fill and Int32ToFloat: elementwise, chunks of whole cache lines on the pool */
typedef struct {
    const int32_t *x;
    float *y;
    float value;
} fill_call;

static void fill_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const fill_call *k = ctx;
    float *restrict y = k->y;
    for (int64_t i = lo; i < hi; ++i)
        y[i] = k->value;
}

static void int_to_float_chunk(void *ctx, int64_t lo, int64_t hi)
{
    const fill_call *k = ctx;
    const int32_t *restrict x = k->x;
    float *restrict y = k->y;
    for (int64_t i = lo; i < hi; ++i)
        y[i] = (float)x[i];
}

int mg_fill(int64_t count, float value, float *y, int num_threads)
{
    if (count < 0 || (count && !y))
        return MG_EINVAL;
    fill_call k = {NULL, y, value};
    mg_pool_rows(mg_stream_threads(num_threads, count), count, 16, fill_chunk, &k);
    return MG_OK;
}

int mg_int32_to_float(int64_t count, const int32_t *x, float *y, int num_threads)
{
    if (count < 0 || (count && (!x || !y)))
        return MG_EINVAL;
    fill_call k = {x, y, 0.0f};
    mg_pool_rows(mg_stream_threads(num_threads, count), count, 16, int_to_float_chunk, &k);
    return MG_OK;
}

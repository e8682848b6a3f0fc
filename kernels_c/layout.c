/* minigraph native layout kernels; see layout.h.
 *
 * Pad writes the output row by row (a row: the innermost dimension): a row inside the input's
 * window is its padding zeros, one memcpy of the input row, zeros again; a row outside it is
 * all zeros. Chunks of rows go to the worker pool, so each chunk writes a contiguous part of
 * y once (no zero-fill pass before the copy). */
#include "layout.h"

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

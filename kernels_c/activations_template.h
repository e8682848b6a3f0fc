/* The activation loops, generated from the list in activations_internal.h and instantiated
 * per ISA by activations_isa_<isa>.c: each expression becomes a loop the compiler
 * vectorizes for the ISA's target (AVX-512, AVX2 or the baseline), tails included, without
 * FMA contraction (every ISA rounds each operation alike: the same bits everywhere).
 *
 * Needs: MG_ISA_NAME (the ISA's name token: defines act_kernels_<isa>).
 */
#pragma GCC push_options
/* fp-contract=off: no fused multiply-adds (the same bits on every ISA); no-trapping-math: a
 * select may evaluate both sides (as a vector select does), so the loops with selects around
 * arithmetic vectorize on AVX2 and the baseline too. Values are unchanged by either. */
#pragma GCC optimize("fp-contract=off", "no-trapping-math") /* to the pop below */
#include "mg_mathf.h"

#define ACT_UNARY_LOOP(name, expr)                                                          \
    static void MG_ISA_FN(name)(const float *restrict xs, float *restrict ys, int64_t n,   \
                                const float a)                                              \
    {                                                                                       \
        (void)a;                                                                            \
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
MG_SCALED_ACTIVATIONS(ACT_UNARY_LOOP)
MG_BINARY_ACTIVATIONS(ACT_BINARY_LOOP)
#pragma GCC pop_options

/* The epilogue stages (activations_internal.h); the affine one rounds as mg_affine.h says. */
#include "mg_affine.h"
static void MG_ISA_FN(channel_add)(float *y, const float *restrict v, int64_t rows,
                                   int64_t channels)
{
    for (int64_t r = 0; r < rows; ++r, y += channels)
        for (int64_t c = 0; c < channels; ++c)
            y[c] += v[c];
}
static void MG_ISA_FN(channel_affine)(float *y, const float *restrict mean,
                                      const float *restrict k, const float *restrict offset,
                                      int64_t rows, int64_t channels)
{
    for (int64_t r = 0; r < rows; ++r, y += channels)
        for (int64_t c = 0; c < channels; ++c)
            y[c] = MG_AFFINE(y[c] - mean[c], k[c], offset[c]);
}
static void MG_ISA_FN(add)(float *y, const float *restrict z, int64_t n)
{
    for (int64_t i = 0; i < n; ++i)
        y[i] += z[i];
}
/* rows_sum over `n` channels, n a constant after inlining: the sums stay in registers
 * through all the rows (each still added row after row) */
static inline __attribute__((always_inline)) void
MG_ISA_FN(rows_sum_n)(float *restrict acc, const float *restrict x, int64_t rows,
                      int64_t stride, const int n)
{
    float s[64];
    for (int c = 0; c < n; ++c)
        s[c] = acc[c];
    for (int64_t r = 0; r < rows; ++r, x += stride)
        for (int c = 0; c < n; ++c)
            s[c] += x[c];
    for (int c = 0; c < n; ++c)
        acc[c] = s[c];
}
static void MG_ISA_FN(rows_sum)(float *restrict acc, const float *restrict x, int64_t rows,
                                int64_t channels, int64_t stride)
{
    int64_t c0 = 0;
    for (; c0 + 64 <= channels; c0 += 64)
        MG_ISA_FN(rows_sum_n)(acc + c0, x + c0, rows, stride, 64);
    for (; c0 + 16 <= channels; c0 += 16)
        MG_ISA_FN(rows_sum_n)(acc + c0, x + c0, rows, stride, 16);
    for (int64_t r = 0; r < rows; ++r, x += stride)
        for (int64_t c = c0; c < channels; ++c)
            acc[c] += x[c];
}

#pragma GCC push_options
#pragma GCC optimize("fp-contract=off") /* every ISA rounds alike, to the pop below */
/* One row of the softmax cross entropy (activations.h): bp holds e^(x - max) until the
 * sum is known */
static void MG_ISA_FN(xent_row)(const float *restrict x, int64_t classes,
                                const float *restrict labels, int64_t label,
                                float *restrict loss, float *restrict bp)
{
    float m = x[0];
    for (int64_t i = 1; i < classes; ++i)
        m = m != m ? m : (!(x[i] <= m) ? x[i] : m); /* a NaN stays */
    float sum = 0.0f;
    for (int64_t i = 0; i < classes; ++i) {
        bp[i] = mgf_exp(x[i] - m);
        sum += bp[i];
    }
    const float lse = mgf_log_ge1(sum);
    float l = 0.0f;
    if (labels) {
        for (int64_t i = 0; i < classes; ++i) {
            l += labels[i] * (lse - (x[i] - m));
            bp[i] = bp[i] / sum - labels[i];
        }
    } else {
        l = lse - (x[label] - m);
        for (int64_t i = 0; i < classes; ++i)
            bp[i] = bp[i] / sum - (i == label ? 1.0f : 0.0f);
    }
    *loss = l;
}

static void MG_ISA_FN(xent_rows)(const float *x, int64_t classes, const float *labels,
                                 const int64_t *sparse, float *loss, float *bp, int64_t lo,
                                 int64_t hi)
{
    for (int64_t r = lo; r < hi; ++r)
        MG_ISA_FN(xent_row)(x + r * classes, classes, labels ? labels + r * classes : NULL,
                            sparse ? sparse[r] : 0, loss + r, bp + r * classes);
}

/* numpy's pairwise summation of a contiguous run (its FLOAT_pairwise_sum: see activations.h
 * for the order); kept exact: no reassociation, no contraction */
static float MG_ISA_FN(pairwise_sum)(const float *x, int64_t n)
{
    if (n < 8) {
        float res = 0.0f;
        for (int64_t i = 0; i < n; ++i)
            res += x[i];
        return res;
    }
    if (n <= 128) {
        float r[8];
        for (int j = 0; j < 8; ++j)
            r[j] = x[j];
        int64_t i = 8;
        for (; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; ++j)
                r[j] += x[i + j];
        float res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i)
            res += x[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return MG_ISA_FN(pairwise_sum)(x, n2) + MG_ISA_FN(pairwise_sum)(x + n2, n - n2);
}

/* a reduction's row as numpy reduces it: +0 (add's identity) plus the row pairwise */
static float MG_ISA_FN(inner_sum)(const float *x, int64_t n)
{
    return 0.0f + MG_ISA_FN(pairwise_sum)(x, n);
}
#pragma GCC pop_options

static void MG_ISA_FN(rows_sum_at)(float *restrict acc, const float *restrict x,
                                   const int64_t *restrict off, int64_t rows, int64_t n)
{
    for (int64_t r = 0; r < rows; ++r) {
        const float *restrict s = x + off[r];
        for (int64_t c = 0; c < n; ++c)
            acc[c] += s[c];
    }
}

#define ACT_ENTRY(name, expr) MG_ISA_FN(name),
const act_kernel_table MG_ISA_FN(act_kernels) = {
    .unary = {MG_UNARY_ACTIVATIONS(ACT_ENTRY) MG_SCALED_ACTIVATIONS(ACT_ENTRY)},
    .binary = {MG_BINARY_ACTIVATIONS(ACT_ENTRY)},
    .channel_add = MG_ISA_FN(channel_add),
    .channel_affine = MG_ISA_FN(channel_affine),
    .add = MG_ISA_FN(add),
    .rows_sum = MG_ISA_FN(rows_sum),
    .inner_sum = MG_ISA_FN(inner_sum),
    .rows_sum_at = MG_ISA_FN(rows_sum_at),
    .xent_rows = MG_ISA_FN(xent_rows),
};

#undef ACT_UNARY_LOOP
#undef ACT_BINARY_LOOP
#undef ACT_ENTRY

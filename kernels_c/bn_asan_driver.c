/* Test driver for `make asan`: runs every entry point of batch_norm.h over awkward sizes,
 * every dtype, every instruction set this CPU has, 1 or 2 threads and plain or non-temporal
 * stores, under AddressSanitizer + UndefinedBehaviorSanitizer. Outputs sit at varying alignments between
 * guard bytes (masked vector stores are not seen by ASan), results must be finite, and the
 * forward statistics and output are checked against a naive double-precision computation. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asan_check.h"
#include "batch_norm.h"
#include "bn_convert.h"

static double uniform(void) /* [0, 1) */ { return (double)(xorshift64() >> 11) * 0x1p-53; }

static size_t elsize(int dtype) { return dtype == MG_BN_F32 ? 4 : 2; }

static double get(int dtype, const void *p, size_t i)
{
    if (dtype == MG_BN_F32)
        return ((const float *)p)[i];
    const uint16_t h = ((const uint16_t *)p)[i];
    return dtype == MG_BN_F16 ? bn_f16_to_f32(h) : bn_bf16_to_f32(h);
}

static void put(int dtype, void *p, size_t i, float v)
{
    if (dtype == MG_BN_F32)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = dtype == MG_BN_F16 ? bn_f32_to_f16(v) : bn_f32_to_bf16(v);
}

/* A tensor of n elements (exact size, so ASan sees over-reads by scalar code). */
static void *input_tensor(int dtype, size_t n, double loc, double spread)
{
    void *p = malloc(n * elsize(dtype) + 1);
    for (size_t i = 0; i < n; ++i)
        put(dtype, p, i, (float)(loc + spread * (uniform() - 0.5)));
    return p;
}

/* An output tensor at a varying alignment (row runs that only write align themselves to
 * their output), with GUARD guard bytes before and after it. */
typedef struct {
    unsigned char *base;
    void *data;
    size_t bytes, total;
} out_buf;

static unsigned output_shift;

static out_buf output_tensor(int dtype, size_t n)
{
    out_buf o;
    const size_t shift = (output_shift++ * elsize(dtype)) % 64;
    o.bytes = n * elsize(dtype);
    o.total = GUARD + 64 + o.bytes + GUARD;
    o.base = malloc(o.total);
    memset(o.base, 0xA5, o.total);
    o.data = o.base + GUARD + shift;
    return o;
}

static void check_output(int dtype, out_buf o, size_t n, const char *what)
{
    for (size_t i = 0; i < n; ++i)
        CHECK(isfinite(get(dtype, o.data, i)), "%s[%zu] = %g is not finite", what, i,
              get(dtype, o.data, i));
    const unsigned char *begin = o.data, *end = begin + o.bytes;
    for (const unsigned char *q = o.base; q < o.base + o.total; ++q)
        if (q < begin || q >= end)
            CHECK(*q == 0xA5, "%s: write outside the tensor (byte %td)", what, q - begin);
    free(o.base);
}

/* Guard bytes only (outputs of the non-finite cases may be NaN or infinite). */
static void check_guards(out_buf o, const char *what)
{
    const unsigned char *begin = o.data, *end = begin + o.bytes;
    for (const unsigned char *q = o.base; q < o.base + o.total; ++q)
        if (q < begin || q >= end)
            CHECK(*q == 0xA5, "%s: write outside the tensor (byte %td)", what, q - begin);
    free(o.base);
}

static float *vector(int64_t c, double lo, double hi)
{
    float *v = malloc((size_t)c * sizeof(float) + 1);
    for (int64_t i = 0; i < c; ++i)
        v[i] = (float)(lo + (hi - lo) * uniform());
    return v;
}

static float *out_vector(int64_t c) { return malloc((size_t)c * sizeof(float) + 1); }

static void check_vector(float *v, int64_t c, const char *what)
{
    for (int64_t i = 0; i < c; ++i)
        CHECK(isfinite(v[i]), "%s[%lld] = %g is not finite", what, (long long)i, v[i]);
    free(v);
}

static void run_case(int dtype, int64_t outer, int64_t channels, int64_t inner, int threads)
{
    const size_t n = (size_t)(outer * channels * inner);
    const double eps = 1e-3;
    void *x = input_tensor(dtype, n, 1.0, 4.0), *dy = input_tensor(dtype, n, 0.2, 2.0);
    void *gx = input_tensor(dtype, n, -0.1, 2.0);
    float *scale = vector(channels, 0.5, 2), *offset = vector(channels, -1, 1);
    float *mean = vector(channels, -1, 1), *var = vector(channels, 1, 3);
    float *gscale = vector(channels, -1, 1), *goffset = vector(channels, -1, 1);
    int rc;

    /* forward training, checked against a naive double computation */
    out_buf y = output_tensor(dtype, n);
    float *bm = out_vector(channels), *bv = out_vector(channels);
    rc = mg_bn_forward_training(dtype, outer, channels, inner, x, scale, offset, eps, y.data, bm,
                                bv, threads);
    CHECK(rc == 0, "forward_training rc %d", rc);
    const double count = (double)(outer * inner);
    for (int64_t c = 0; c < channels && count > 0; ++c) {
        double sum = 0, sq = 0;
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < inner; ++i)
                sum += get(dtype, x, (size_t)((o * channels + c) * inner + i));
        const double mu = sum / count;
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < inner; ++i) {
                const double d = get(dtype, x, (size_t)((o * channels + c) * inner + i)) - mu;
                sq += d * d;
            }
        const double v = sq / count, a = scale[c] / sqrt(v + eps);
        CHECK(fabs(bm[c] - mu) <= 1e-5 * (fabs(mu) + 2), "mean[%lld] %g vs %g", (long long)c,
              bm[c], mu);
        CHECK(fabs(bv[c] - v) <= 1e-5 * v + 1e-9, "variance[%lld] %g vs %g", (long long)c,
              bv[c], v);
        const double tol = dtype == MG_BN_F32 ? 1e-4 : 2e-2;
        for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < inner; ++i) {
                const size_t at = (size_t)((o * channels + c) * inner + i);
                const double want = (get(dtype, x, at) - mu) * a + offset[c];
                CHECK(fabs(get(dtype, y.data, at) - want) <= tol * (fabs(want) + 1), "y %g vs %g",
                      get(dtype, y.data, at), want);
            }
    }
    check_output(dtype, y, n, "y");
    if (count > 0) {
        check_vector(bm, channels, "mean");
        check_vector(bv, channels, "variance");
    } else {
        free(bm);
        free(bv);
    }

    y = output_tensor(dtype, n);
    rc = mg_bn_forward_inference(dtype, outer, channels, inner, x, scale, offset, mean, var, eps,
                                 y.data, threads);
    CHECK(rc == 0, "forward_inference rc %d", rc);
    check_output(dtype, y, n, "y (inference)");

    for (int training = 0; training < 2; ++training) {
        out_buf dx = output_tensor(dtype, n);
        float *sb = out_vector(channels), *ob = out_vector(channels);
        rc = (training ? mg_bn_backward_training : mg_bn_backward_inference)(
            dtype, outer, channels, inner, dy, x, scale, mean, var, eps, dx.data, sb, ob, threads);
        CHECK(rc == 0, "backward rc %d", rc);
        check_output(dtype, dx, n, "dx");
        check_vector(sb, channels, "scale_backprop");
        check_vector(ob, channels, "offset_backprop");

        out_buf ddy = output_tensor(dtype, n), ddx = output_tensor(dtype, n);
        float *ds = out_vector(channels);
        if (training)
            rc = mg_bn_grad_grad_training(dtype, outer, channels, inner, dy, x, scale, gx, gscale,
                                          goffset, eps, ddy.data, ddx.data, ds, threads);
        else
            rc = mg_bn_grad_grad_inference(dtype, outer, channels, inner, dy, x, scale, mean, var,
                                           gx, gscale, goffset, eps, ddy.data, ddx.data, ds,
                                           threads);
        CHECK(rc == 0, "grad_grad rc %d", rc);
        check_output(dtype, ddy, n, "d_dy");
        check_output(dtype, ddx, n, "d_x");
        check_vector(ds, channels, "d_scale");
    }
    free(x);
    free(dy);
    free(gx);
    free(scale);
    free(offset);
    free(mean);
    free(var);
    free(gscale);
    free(goffset);
}

/* Exceptional channels (the scalar recomputation in the reference's order): channel 0 of
 * x holds -inf, channel 1 (if any) 3.4e38 everywhere in x, dy and gx, and the last channel
 * has an infinite mean and variance; every entry point runs, outputs stay in bounds, and
 * channel 0's batch mean is -inf with a NaN variance. */
static void run_exceptional_case(int dtype, int64_t outer, int64_t channels, int64_t inner,
                                 int threads)
{
    const size_t n = (size_t)(outer * channels * inner);
    const double eps = 1e-3;
    void *x = input_tensor(dtype, n, 1.0, 4.0), *dy = input_tensor(dtype, n, 0.2, 2.0);
    void *gx = input_tensor(dtype, n, -0.1, 2.0);
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
            put(dtype, x, (size_t)(o * channels * inner + i), -INFINITY);
            if (channels > 1) {
                const size_t at = (size_t)((o * channels + 1) * inner + i);
                put(dtype, x, at, 3.4e38f);
                put(dtype, dy, at, 3.4e38f);
                put(dtype, gx, at, 3.4e38f);
            }
        }
    float *scale = vector(channels, 0.5, 2), *offset = vector(channels, -1, 1);
    float *mean = vector(channels, -1, 1), *var = vector(channels, 1, 3);
    float *gscale = vector(channels, -1, 1), *goffset = vector(channels, -1, 1);
    mean[channels - 1] = INFINITY;
    var[channels - 1] = INFINITY;
    float *v0 = out_vector(channels), *v1 = out_vector(channels);
    out_buf a = output_tensor(dtype, n), b = output_tensor(dtype, n);
    int rc = mg_bn_forward_training(dtype, outer, channels, inner, x, scale, offset, eps, a.data,
                                    v0, v1, threads);
    CHECK(rc == 0 && isinf(v0[0]) && v0[0] < 0 && isnan(v1[0]),
          "exceptional forward: rc %d, mean %g, variance %g", rc, v0[0], v1[0]);
    check_guards(a, "exceptional y");
    a = output_tensor(dtype, n);
    rc = mg_bn_backward_training(dtype, outer, channels, inner, dy, x, scale, mean, var, eps,
                                 a.data, v0, v1, threads);
    rc |= mg_bn_backward_inference(dtype, outer, channels, inner, dy, x, scale, mean, var, eps,
                                   a.data, v0, v1, threads);
    check_guards(a, "exceptional dx");
    a = output_tensor(dtype, n);
    rc |= mg_bn_grad_grad_training(dtype, outer, channels, inner, dy, x, scale, gx, gscale,
                                   goffset, eps, a.data, b.data, v0, threads);
    rc |= mg_bn_grad_grad_inference(dtype, outer, channels, inner, dy, x, scale, mean, var, gx,
                                    gscale, goffset, eps, a.data, b.data, v0, threads);
    CHECK(rc == 0, "exceptional rc %d", rc);
    check_guards(a, "exceptional d_dy");
    check_guards(b, "exceptional d_x");
    free(v0);
    free(v1);
    free(x);
    free(dy);
    free(gx);
    free(scale);
    free(offset);
    free(mean);
    free(var);
    free(gscale);
    free(goffset);
}

int main(void)
{
    static const int64_t outers[] = {1, 2, 5, 70}, channels[] = {1, 3, 17, 32, 65},
                         inners[] = {1, 7, 33, 35, 64, 200};
    static const int64_t big[][3] = {{2, 3, 70001}, {3000, 5, 7},  {5000, 17, 1},
                                     {3, 2, 40000}, {3, 1300, 1},  {1, 5000, 3},
                                     {600, 6, 9},   {2, 130, 300}, {0, 3, 5},
                                     {2, 0, 5},     {2, 3, 0},     {40, 48, 36},
                                     {70, 512, 49}};
    const char *names[] = {"scalar", "avx2", "avx512"};
    int cases = 0;
    for (int isa = MG_ISA_SCALAR; isa <= MG_ISA_AVX512; ++isa) {
        if (mg_set_isa(isa) != isa)
            continue;
        for (int dtype = MG_BN_F32; dtype <= MG_BN_BF16; ++dtype)
            for (int variant = 0; variant < 3; ++variant) {
                /* 1 thread, 2 threads, 2 threads with non-temporal stores forced on */
                const int threads = variant ? 2 : 1;
                mg_bn_set_streaming(variant == 2 ? 1 : -1);
                for (size_t a = 0; a < sizeof outers / sizeof *outers; ++a)
                    for (size_t b = 0; b < sizeof channels / sizeof *channels; ++b)
                        for (size_t c = 0; c < sizeof inners / sizeof *inners; ++c, ++cases)
                            run_case(dtype, outers[a], channels[b], inners[c], threads);
                for (size_t i = 0; i < sizeof big / sizeof *big; ++i, ++cases)
                    run_case(dtype, big[i][0], big[i][1], big[i][2], threads);
                for (size_t i = 0; i < sizeof big / sizeof *big; ++i)
                    if (big[i][0] * big[i][1] * big[i][2] > 0)
                        run_exceptional_case(dtype, big[i][0], big[i][1], big[i][2], threads);
                run_exceptional_case(dtype, 5, 3, 7, threads);
            }
        printf("%s: ok\n", names[isa]);
    }
    CHECK(mg_bn_forward_training(7, 1, 1, 1, NULL, NULL, NULL, 0, NULL, NULL, NULL, 1) ==
              MG_EINVAL, "bad dtype accepted");
    printf("%d cases x 6 functions, %d failures\n", cases, failures);
    return failures != 0;
}

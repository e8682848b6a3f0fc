/* Test driver for `make asan` (conv3d_gemm.h, window_pass.h, pool3d_grad.h): random 3-D
 * geometries (strides, dilations, pads, sizes 1-7, 1-40 channels), 1 or 3 threads, under
 * AddressSanitizer + UndefinedBehaviorSanitizer. Inputs are allocated at their exact size;
 * outputs sit between guard bytes that must survive (ASan does not see masked vector
 * stores), on every instruction set this CPU has. The convolutions are checked against naive loops in double precision within the
 * GEMM bound (K * 2^-24 * sum |a*b|, conv3d_gemm.h), the window passes, MaxPool3DGrad and
 * MaxPool3DGradGrad against naive loops in the stated order bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asan_check.h"
#include "conv3d_gemm.h"
#include "gemm.h"
#include "mg_runtime.h"
#include "pool3d_grad.h"
#include "window_pass.h"

static int64_t pick(int64_t lo, int64_t hi) { return lo + (int64_t)(xorshift64() % (uint64_t)(hi - lo + 1)); }

static float *random_floats(int64_t n)
{
    float *a = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; ++i)
        a[i] = (float)((int64_t)(xorshift64() % 2001) - 1000) / 250.0f;
    return a;
}

/* n floats between guard bytes of 0x5a */
static float *guarded(int64_t n)
{
    unsigned char *raw = malloc((size_t)n * sizeof(float) + 2 * GUARD);
    memset(raw, 0x5a, (size_t)n * sizeof(float) + 2 * GUARD);
    return (float *)(raw + GUARD);
}

static void release(float *a, int64_t n, const char *what)
{
    unsigned char *raw = (unsigned char *)a - GUARD;
    for (int i = 0; i < GUARD; ++i)
        CHECK(raw[i] == 0x5a && raw[GUARD + n * (int64_t)sizeof(float) + i] == 0x5a,
              "%s: guard byte %d overwritten", what, i);
    free(raw);
}

/* The input voxel of output voxel u through tap a along dim d, or -1 outside */
static int64_t tap_at(const mg_conv3d_shape *s, int d, int64_t u, int64_t a)
{
    const int64_t v = u * s->stride[d] - s->pad[d] + a * s->dilation[d];
    return v >= 0 && v < s->in[d] ? v : -1;
}

static int cases;

static void check_conv(const mg_conv3d_shape *s, int nt)
{
    ++cases;
    const int64_t taps = s->k[0] * s->k[1] * s->k[2], xs = s->n * s->in[0] * s->in[1] * s->in[2];
    const int64_t ys = s->n * s->out[0] * s->out[1] * s->out[2], fs = taps * s->c * s->co;
    float *x = random_floats(xs * s->c), *f = random_floats(fs), *dy = random_floats(ys * s->co);
    double *y = calloc((size_t)(ys * s->co + 1), sizeof(double)), *ym = calloc((size_t)(ys * s->co + 1), sizeof(double));
    double *dx = calloc((size_t)(xs * s->c + 1), sizeof(double)), *dxm = calloc((size_t)(xs * s->c + 1), sizeof(double));
    double *df = calloc((size_t)(fs + 1), sizeof(double)), *dfm = calloc((size_t)(fs + 1), sizeof(double));
    for (int64_t img = 0; img < s->n; ++img)
        for (int64_t u = 0; u < s->out[0] * s->out[1] * s->out[2]; ++u)
            for (int64_t t = 0; t < taps; ++t) {
                const int64_t u0 = u / (s->out[1] * s->out[2]), u1 = u / s->out[2] % s->out[1], u2 = u % s->out[2];
                const int64_t v0 = tap_at(s, 0, u0, t / (s->k[1] * s->k[2])), v1 = tap_at(s, 1, u1, t / s->k[2] % s->k[1]),
                              v2 = tap_at(s, 2, u2, t % s->k[2]);
                if (v0 < 0 || v1 < 0 || v2 < 0)
                    continue;
                const int64_t xi = (((img * s->in[0] + v0) * s->in[1] + v1) * s->in[2] + v2) * s->c;
                const int64_t yi = (img * s->out[0] * s->out[1] * s->out[2] + u) * s->co;
                for (int64_t ci = 0; ci < s->c; ++ci)
                    for (int64_t o = 0; o < s->co; ++o) {
                        const double a = x[xi + ci], b = f[(t * s->c + ci) * s->co + o], g = dy[yi + o];
                        y[yi + o] += a * b, ym[yi + o] += fabs(a * b);
                        dx[xi + ci] += g * b, dxm[xi + ci] += fabs(g * b);
                        df[(t * s->c + ci) * s->co + o] += a * g, dfm[(t * s->c + ci) * s->co + o] += fabs(a * g);
                    }
            }
    const int64_t kk = taps * s->c;
    float *packed = malloc((size_t)(mg_gemm_packed_floats(kk, s->co) + 1) * sizeof(float));
    mg_gemm_pack_b(kk, s->co, 0, f, packed, 1);
    float *got_y = guarded(ys * s->co), *got_dx = guarded(xs * s->c), *got_df = guarded(fs);
    CHECK(mg_conv3d_gemm_forward(s, x, packed, got_y, nt) == MG_OK, "forward failed");
    CHECK(mg_conv3d_gemm_backprop_input(s, f, dy, got_dx, nt) == MG_OK, "input failed");
    CHECK(mg_conv3d_gemm_backprop_filter(s, x, dy, got_df, nt) == MG_OK, "filter failed");
    const double eps = ldexp(1.0, -24);
    for (int64_t i = 0; i < ys * s->co; ++i)
        CHECK(fabs(got_y[i] - y[i]) <= (kk + 1) * eps * ym[i] + 1e-30, "forward %lld", (long long)i);
    for (int64_t i = 0; i < xs * s->c; ++i)
        CHECK(fabs(got_dx[i] - dx[i]) <= (taps * s->co + 1) * eps * dxm[i] + 1e-30, "input %lld", (long long)i);
    for (int64_t i = 0; i < fs; ++i)
        CHECK(fabs(got_df[i] - df[i]) <= (ys + 1) * eps * dfm[i] + 1e-30, "filter %lld", (long long)i);
    release(got_y, ys * s->co, "forward");
    release(got_dx, xs * s->c, "input");
    release(got_df, fs, "filter");
    free(x), free(f), free(dy), free(y), free(ym), free(dx), free(dxm), free(df), free(dfm), free(packed);
}

static void check_pools(int nt)
{
    const int64_t outer = pick(1, 5), n = pick(1, 9), inner = pick(1, 20), k = pick(1, 4);
    const int64_t s = pick(1, 3), before = pick(0, k - 1), out = (n + before - 1) / s + 1;
    float *x = random_floats(outer * n * inner), *y = guarded(outer * out * inner);
    float *dx = guarded(outer * n * inner);
    CHECK(mg_window_sum(outer, n, inner, k, s, before, out, x, y, nt) == MG_OK, "sum failed");
    CHECK(mg_window_spread(outer, n, inner, k, s, before, out, y, dx, nt) == MG_OK, "spread failed");
    for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < inner; ++j) {
            for (int64_t p = 0; p < out; ++p) {
                float acc = 0.0f;
                for (int64_t i = 0; i < k; ++i)
                    if (p * s - before + i >= 0 && p * s - before + i < n)
                        acc += x[(o * n + p * s - before + i) * inner + j];
                CHECK(acc == y[(o * out + p) * inner + j], "sum %lld", (long long)p);
            }
            for (int64_t r = 0; r < n; ++r) {
                float acc = 0.0f;
                for (int64_t p = out - 1; p >= 0; --p)
                    if (r - (p * s - before) >= 0 && r - (p * s - before) < k)
                        acc += y[(o * out + p) * inner + j];
                CHECK(acc == dx[(o * n + r) * inner + j], "spread %lld", (long long)r);
            }
        }
    /* MaxPool3DGrad over an [1][n][2][3][inner] input with window (k, 1, 2) */
    const int64_t sizes[17] = {1, inner, n, 2, 3, k, 1, 2, s, 1, 1, before, 0, 0, out, 2, 2};
    const int64_t xs = n * 6 * inner, ys = out * 4 * inner;
    float *xin = random_floats(xs), *yo = random_floats(ys), *g = random_floats(ys);
    for (int64_t i = 0; i < ys; ++i) /* some ties */
        if (i % 3 == 0)
            yo[i] = xin[i % xs];
    float *gx = guarded(xs);
    CHECK(mg_max_pool3d_grad(sizes, xin, yo, g, gx, nt) == MG_OK, "max pool grad failed");
    for (int64_t z = 0; z < n; ++z)
        for (int64_t r = 0; r < 2; ++r)
            for (int64_t q = 0; q < 3; ++q)
                for (int64_t ci = 0; ci < inner; ++ci) {
                    float acc = 0.0f;
                    const float xv = xin[((z * 2 + r) * 3 + q) * inner + ci];
                    for (int64_t pw = 0; pw < 2; ++pw)
                        for (int64_t pd = 0; pd < out; ++pd) {
                            if (q - pw < 0 || q - pw >= 2 || z - (pd * s - before) < 0 ||
                                z - (pd * s - before) >= k)
                                continue;
                            const int64_t oi = ((pd * 2 + r) * 2 + pw) * inner + ci;
                            if (fabsf(xv - yo[oi]) < 1e-5f)
                                acc += g[oi];
                        }
                    CHECK(acc == gx[((z * 2 + r) * 3 + q) * inner + ci], "max pool grad");
                }
    /* MaxPool3DGradGrad: the first exact match, row-major over the window */
    float *gg = guarded(ys), *gin = random_floats(xs);
    CHECK(mg_max_pool3d_grad_grad(sizes, xin, yo, gin, gg, nt) == MG_OK, "grad grad failed");
    for (int64_t pd = 0; pd < out; ++pd)
        for (int64_t r = 0; r < 2; ++r)
            for (int64_t pw = 0; pw < 2; ++pw)
                for (int64_t ci = 0; ci < inner; ++ci) {
                    float want = 0.0f;
                    const int64_t oi = ((pd * 2 + r) * 2 + pw) * inner + ci;
                    for (int64_t a = 0; a < k * 2; ++a) {
                        const int64_t z = pd * s - before + a / 2, q = pw + a % 2;
                        const int64_t xi = ((z * 2 + r) * 3 + q) * inner + ci;
                        if (z >= 0 && z < n && xin[xi] == yo[oi]) {
                            want = gin[xi];
                            break;
                        }
                    }
                    CHECK(want == gg[oi], "grad grad");
                }
    release(gg, ys, "grad grad");
    free(gin);
    release(y, outer * out * inner, "sum");
    release(dx, outer * n * inner, "spread");
    release(gx, xs, "max pool grad");
    free(x), free(xin), free(yo), free(g);
}

int main(void)
{
    for (int isa = MG_ISA_SCALAR; isa <= MG_ISA_AVX512; ++isa) {
        if (mg_set_isa(isa) != isa)
            continue;
        for (int trial = 0; trial < 40; ++trial) {
        mg_conv3d_shape s = {pick(1, 2), pick(1, 40), pick(1, 40), {0}, {0}, {0}, {0}, {0}, {0}};
        for (int d = 0; d < 3; ++d) {
            s.k[d] = pick(1, 3);
            s.stride[d] = pick(1, 3);
            s.dilation[d] = pick(1, 2);
            s.in[d] = pick(1, 7);
            const int64_t span = (s.k[d] - 1) * s.dilation[d] + 1;
            s.pad[d] = pick(0, span - 1);
            const int64_t room = s.in[d] + s.pad[d] + pick(0, span - 1) - span;
            s.out[d] = room < 0 ? 0 : room / s.stride[d] + 1;
        }
        if (s.out[0] * s.out[1] * s.out[2] == 0)
            continue;
        check_conv(&s, trial % 2 ? 3 : 1);
        check_pools(trial % 2 ? 3 : 1);
        }
    }
    printf("conv3d_asan: %d geometries, %d failures\n", cases, failures);
    return failures != 0;
}

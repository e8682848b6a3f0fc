/* Test driver for `make asan` (convolution.h, conv_gemm.h, depthwise.h, pooling.h,
 * activations.h, broadcast.h, optimizers.h):
 * every entry point over awkward sizes, both layouts, SAME/VALID-like pads, every
 * instruction set this CPU has and 1 or 3 threads, under AddressSanitizer +
 * UndefinedBehaviorSanitizer. Inputs are allocated at their exact size (scalar over-reads
 * are seen); outputs sit between guard bytes that must survive (ASan does not see masked
 * vector stores). Results are checked against naive loops in double precision, Relu6,
 * Relu6Grad, LeakyRelu, Softsign and the broadcasting binary ops against their scalar
 * formulas bit for bit, the exponential activations against libm's double within their ulp
 * bounds (activations.h). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asan_check.h"
#include "mg_runtime.h"
#include "convolution.h"
#include "conv_gemm.h"
#include "depthwise.h"
#include "gemm.h"
#include "activations.h"
#include "activations_internal.h"
#include "broadcast.h"
#include "broadcast_internal.h"
#include "optimizers.h"
#include "pooling.h"

/* The gradients' scalar expressions (activations_internal.h), compiled here unvectorized */
#define SCALAR_BINARY(name, expr)                                                           \
    static float scalar_##name(float g, float x) { return (expr); }
MG_BINARY_ACTIVATIONS(SCALAR_BINARY)

static float uniform(void) /* [-1, 1) */
{
    return (float)((double)(xorshift64() >> 11) * 0x1p-52 - 1.0);
}

static float *input(size_t n)
{
    float *p = malloc(n * sizeof(float) + 1);
    for (size_t i = 0; i < n; ++i)
        p[i] = uniform();
    return p;
}

/* An output of n floats at offset `shift` floats inside guard bytes. */
static float *output(size_t n, int shift, unsigned char **block)
{
    *block = malloc(2 * GUARD + (n + 16) * sizeof(float));
    memset(*block, 0xA5, 2 * GUARD + (n + 16) * sizeof(float));
    return (float *)(*block + GUARD) + shift;
}

static void check_guards(const unsigned char *block, size_t n, int shift, const char *what)
{
    const size_t total = 2 * GUARD + (n + 16) * sizeof(float);
    const size_t lo = GUARD + (size_t)shift * sizeof(float), hi = lo + n * sizeof(float);
    for (size_t i = 0; i < total; ++i)
        if (i < lo || i >= hi) {
            CHECK(block[i] == 0xA5, "%s: guard byte %zu overwritten", what, i);
            if (block[i] != 0xA5)
                return;
        }
}

static size_t at(int64_t n, int64_t y, int64_t x, int64_t c, int64_t H, int64_t W, int64_t C,
                 int cl)
{
    return (size_t)(cl ? ((n * H + y) * W + x) * C + c : ((n * C + c) * H + y) * W + x);
}

static void close_to(const float *got, const double *exact, const double *mag, size_t n,
                     const char *what)
{
    for (size_t i = 0; i < n; ++i) {
        const double err = fabs((double)got[i] - exact[i]);
        CHECK(err <= 1e-5 * mag[i] + 1e-30, "%s[%zu]: %g vs %g (magnitude %g)", what, i,
              (double)got[i], exact[i], mag[i]);
        if (err > 1e-5 * mag[i] + 1e-30)
            return;
    }
}

static void conv_case(int64_t n, int64_t h, int64_t w, int64_t c, int64_t co, int64_t kh,
                      int64_t kw, int same, int cl, int threads, int shift)
{
    const int64_t pt = same ? (kh - 1) / 2 : 0, pl = same ? (kw - 1) / 2 : 0;
    const int64_t oh = same ? h : h - kh + 1, ow = same ? w : w - kw + 1;
    if (oh <= 0 || ow <= 0)
        return;
    const size_t nx = (size_t)(n * h * w * c), nf = (size_t)(kh * kw * c * co);
    const size_t ny = (size_t)(n * oh * ow * co);
    float *x = input(nx), *f = input(nf), *dy = input(ny);
    double *e[3], *m[3];
    const size_t sizes[3] = {ny, nx, nf};
    for (int k = 0; k < 3; ++k) {
        e[k] = calloc(sizes[k], sizeof(double));
        m[k] = calloc(sizes[k], sizeof(double));
    }
    for (int64_t b = 0; b < n; ++b)
        for (int64_t y = 0; y < oh; ++y)
            for (int64_t xo = 0; xo < ow; ++xo)
                for (int64_t i = 0; i < kh; ++i)
                    for (int64_t j = 0; j < kw; ++j) {
                        const int64_t yy = y + i - pt, xx = xo + j - pl;
                        if (yy < 0 || yy >= h || xx < 0 || xx >= w)
                            continue;
                        for (int64_t ci = 0; ci < c; ++ci)
                            for (int64_t o = 0; o < co; ++o) {
                                const double xv = x[at(b, yy, xx, ci, h, w, c, cl)];
                                const double fv = f[((i * kw + j) * c + ci) * co + o];
                                const double dv = dy[at(b, y, xo, o, oh, ow, co, cl)];
                                const size_t iy = at(b, y, xo, o, oh, ow, co, cl);
                                const size_t ix = at(b, yy, xx, ci, h, w, c, cl);
                                const size_t iff = (size_t)(((i * kw + j) * c + ci) * co + o);
                                e[0][iy] += xv * fv, m[0][iy] += fabs(xv * fv);
                                e[1][ix] += dv * fv, m[1][ix] += fabs(dv * fv);
                                e[2][iff] += xv * dv, m[2][iff] += fabs(xv * dv);
                            }
                    }
    unsigned char *blk[3];
    float *out[3];
    for (int k = 0; k < 3; ++k)
        out[k] = output(sizes[k], shift, &blk[k]);
    int rc = mg_conv2d_forward(n, h, w, c, kh, kw, co, 1, 1, pt, pl, oh, ow, cl, x, f, out[0], NULL,
                               threads);
    CHECK(rc == 0, "forward rc %d", rc);
    rc = mg_conv2d_backprop_input(n, h, w, c, kh, kw, co, pt, pl, oh, ow, cl, f, dy, out[1],
                                  threads);
    CHECK(rc == 0, "backprop_input rc %d", rc);
    rc = mg_conv2d_backprop_filter(n, h, w, c, kh, kw, co, pt, pl, oh, ow, cl, x, dy, out[2],
                                   threads);
    CHECK(rc == 0, "backprop_filter rc %d", rc);
    static const char *names[3] = {"conv forward", "conv backprop input", "conv backprop filter"};
    for (int k = 0; k < 3; ++k) {
        close_to(out[k], e[k], m[k], sizes[k], names[k]);
        check_guards(blk[k], sizes[k], shift, names[k]);
        free(blk[k]);
        free(e[k]);
        free(m[k]);
    }
    free(x);
    free(f);
    free(dy);
}

/* Implicit-GEMM forward: x [n,h,w,c] NHWC, f [kh,kw,c/groups,co] packed per group, strides
 * s, dilations d, pads pt/pl before (any size), out_h/out_w from pads pb/pr after. */
static void conv_gemm_case(const int64_t *g, int threads, int shift)
{
    const int64_t n = g[0], h = g[1], w = g[2], c = g[3], co = g[4], kh = g[5], kw = g[6];
    const int64_t groups = g[7], s = g[8], d = g[9], pt = g[10], pl = g[11], pb = g[12],
                  pr = g[13];
    const int64_t oh = (h + pt + pb - (kh - 1) * d - 1) / s + 1;
    const int64_t ow = (w + pl + pr - (kw - 1) * d - 1) / s + 1;
    const int64_t cg = c / groups, cog = co / groups, k = kh * kw * cg;
    if (oh <= 0 || ow <= 0)
        return;
    const size_t nx = (size_t)(n * h * w * c), nf = (size_t)(k * co);
    const size_t ny = (size_t)(n * oh * ow * co), gfloats = (size_t)mg_gemm_packed_floats(k, cog);
    float *x = input(nx), *f = input(nf), *packed = malloc(gfloats * groups * sizeof(float));
    float *block = malloc((size_t)(k * cog) * sizeof(float) + 1);
    for (int64_t gr = 0; gr < groups; ++gr) { /* group gr's columns, then packed */
        for (int64_t r = 0; r < k; ++r)
            memcpy(block + r * cog, f + r * co + gr * cog, (size_t)cog * sizeof(float));
        CHECK(mg_gemm_pack_b(k, cog, 0, block, packed + gr * gfloats, threads) == 0, "pack");
    }
    double *e = calloc(ny, sizeof(double)), *m = calloc(ny, sizeof(double));
    for (int64_t b = 0; b < n; ++b)
        for (int64_t y = 0; y < oh; ++y)
            for (int64_t xo = 0; xo < ow; ++xo)
                for (int64_t i = 0; i < kh; ++i)
                    for (int64_t j = 0; j < kw; ++j) {
                        const int64_t yy = y * s + i * d - pt, xx = xo * s + j * d - pl;
                        if (yy < 0 || yy >= h || xx < 0 || xx >= w)
                            continue;
                        for (int64_t o = 0; o < co; ++o)
                            for (int64_t ci = 0; ci < cg; ++ci) {
                                const double v = (double)x[at(b, yy, xx, o / cog * cg + ci, h, w,
                                                              c, 1)] *
                                                 f[((i * kw + j) * cg + ci) * co + o];
                                const size_t iy = at(b, y, xo, o, oh, ow, co, 1);
                                e[iy] += v, m[iy] += fabs(v);
                            }
                    }
    unsigned char *blk;
    float *out = output(ny, shift, &blk);
    const int rc = mg_conv_gemm_forward(n, h, w, c, kh, kw, co, groups, s, s, d, d, pt, pl,
                                        oh, ow, x, packed, out, NULL, threads);
    CHECK(rc == 0, "conv gemm rc %d", rc);
    close_to(out, e, m, ny, "conv gemm forward");
    check_guards(blk, ny, shift, "conv gemm forward");
    free(blk);
    free(e);
    free(m);
    free(x);
    free(f);
    free(packed);
    free(block);
}

/* Depthwise: x [n,h,w,c], f [kh,kw,c,mult], strides s, dilations d, pads pt/pl before and
 * after (any size: EXPLICIT-like); NHWC only. */
static void depthwise_case(int64_t n, int64_t h, int64_t w, int64_t c, int64_t mult,
                           int64_t kh, int64_t kw, int64_t s, int64_t d, int64_t pt,
                           int64_t pl, int threads, int shift)
{
    const int64_t oh = (h + 2 * pt - (kh - 1) * d - 1) / s + 1;
    const int64_t ow = (w + 2 * pl - (kw - 1) * d - 1) / s + 1;
    if (oh <= 0 || ow <= 0)
        return;
    const int64_t co = c * mult;
    const size_t nx = (size_t)(n * h * w * c), nf = (size_t)(kh * kw * co);
    const size_t ny = (size_t)(n * oh * ow * co);
    float *x = input(nx), *f = input(nf), *dy = input(ny);
    double *e[3], *m[3];
    const size_t sizes[3] = {ny, nx, nf};
    for (int k = 0; k < 3; ++k) {
        e[k] = calloc(sizes[k], sizeof(double));
        m[k] = calloc(sizes[k], sizeof(double));
    }
    for (int64_t b = 0; b < n; ++b)
        for (int64_t y = 0; y < oh; ++y)
            for (int64_t xo = 0; xo < ow; ++xo)
                for (int64_t i = 0; i < kh; ++i)
                    for (int64_t j = 0; j < kw; ++j) {
                        const int64_t yy = y * s + i * d - pt, xx = xo * s + j * d - pl;
                        if (yy < 0 || yy >= h || xx < 0 || xx >= w)
                            continue;
                        for (int64_t o = 0; o < co; ++o) {
                            const size_t ix = at(b, yy, xx, o / mult, h, w, c, 1);
                            const size_t iy = at(b, y, xo, o, oh, ow, co, 1);
                            const size_t iff = (size_t)((i * kw + j) * co + o);
                            const double xv = x[ix], fv = f[iff], dv = dy[iy];
                            e[0][iy] += xv * fv, m[0][iy] += fabs(xv * fv);
                            e[1][ix] += dv * fv, m[1][ix] += fabs(dv * fv);
                            e[2][iff] += xv * dv, m[2][iff] += fabs(xv * dv);
                        }
                    }
    unsigned char *blk[3];
    float *out[3];
    for (int k = 0; k < 3; ++k)
        out[k] = output(sizes[k], shift, &blk[k]);
    int rc = mg_depthwise_forward(n, h, w, c, kh, kw, mult, s, s, d, d, pt, pl, oh, ow, x, f,
                                  out[0], threads);
    CHECK(rc == 0, "depthwise forward rc %d", rc);
    rc = mg_depthwise_backprop_input(n, h, w, c, kh, kw, mult, s, s, d, d, pt, pl, oh, ow, f,
                                     dy, out[1], threads);
    CHECK(rc == 0, "depthwise backprop_input rc %d", rc);
    rc = mg_depthwise_backprop_filter(n, h, w, c, kh, kw, mult, s, s, d, d, pt, pl, oh, ow, x,
                                      dy, out[2], threads);
    CHECK(rc == 0, "depthwise backprop_filter rc %d", rc);
    static const char *names[3] = {"depthwise forward", "depthwise backprop input",
                                   "depthwise backprop filter"};
    for (int k = 0; k < 3; ++k) {
        close_to(out[k], e[k], m[k], sizes[k], names[k]);
        check_guards(blk[k], sizes[k], shift, names[k]);
        free(blk[k]);
        free(e[k]);
        free(m[k]);
    }
    free(x);
    free(f);
    free(dy);
}

static void pool_case(int64_t n, int64_t h, int64_t w, int64_t c, int64_t k, int64_t s,
                      int same, int cl, int threads, int shift)
{
    const int64_t oh = same ? (h + s - 1) / s : (h - k + s) / s;
    const int64_t ow = same ? (w + s - 1) / s : (w - k + s) / s;
    if (oh <= 0 || ow <= 0)
        return;
    const int64_t needh = (oh - 1) * s + k - h, needw = (ow - 1) * s + k - w;
    const int64_t pt = same && needh > 0 ? needh / 2 : 0, pl = same && needw > 0 ? needw / 2 : 0;
    const size_t nx = (size_t)(n * h * w * c), ny = (size_t)(n * oh * ow * c);
    float *x = input(nx), *g = input(ny);
    for (size_t i = 0; i < nx; ++i) /* ties */
        x[i] = (float)(int)(x[i] * 2.0f);
    unsigned char *by, *bdx;
    float *y = output(ny, shift, &by), *dx = output(nx, shift, &bdx);
    int rc = mg_max_pool(n, h, w, c, k, k, s, s, pt, pl, oh, ow, cl, x, y, threads);
    CHECK(rc == 0, "max_pool rc %d", rc);
    rc = mg_max_pool_grad(n, h, w, c, k, k, s, s, pt, pl, oh, ow, cl, x, g, dx, threads);
    CHECK(rc == 0, "max_pool_grad rc %d", rc);
    double *edx = calloc(nx, sizeof(double));
    for (int64_t b = 0; b < n; ++b)
        for (int64_t ci = 0; ci < c; ++ci)
            for (int64_t oy = 0; oy < oh; ++oy)
                for (int64_t ox = 0; ox < ow; ++ox) {
                    size_t best = (size_t)-1;
                    /* the window clipped to the image (k may be far larger than h, w) */
                    const int64_t y0 = oy * s - pt, x0 = ox * s - pl;
                    const int64_t y1 = y0 + k < h ? y0 + k : h, x1 = x0 + k < w ? x0 + k : w;
                    for (int64_t yy = y0 < 0 ? 0 : y0; yy < y1; ++yy)
                        for (int64_t xx = x0 < 0 ? 0 : x0; xx < x1; ++xx) {
                            const size_t e = at(b, yy, xx, ci, h, w, c, cl);
                            if (best == (size_t)-1 || x[e] > x[best])
                                best = e;
                        }
                    const size_t o = at(b, oy, ox, ci, oh, ow, c, cl);
                    CHECK(y[o] == x[best], "max_pool value at %zu", o);
                    edx[best] += g[o];
                }
    /* one contribution at most: exact; overlapping windows add up to k * k in float32 */
    for (size_t i = 0; i < nx; ++i)
        CHECK(fabs((double)dx[i] - edx[i]) <= (s >= k ? 0.0 : 1e-5 * (1.0 + fabs(edx[i]))),
              "max_pool_grad at %zu: %g vs %g", i, (double)dx[i], edx[i]);
    check_guards(by, ny, shift, "max_pool");
    check_guards(bdx, nx, shift, "max_pool_grad");
    free(edx);
    free(by);
    free(bdx);
    free(x);
    free(g);
}

static void elementwise_case(int64_t count, int threads, int shift)
{
    float *x = input((size_t)count), *g = input((size_t)count), *m = input((size_t)count);
    float *v = input((size_t)count), *var = input((size_t)count);
    for (int64_t i = 0; i < count; ++i)
        v[i] = fabsf(v[i]);
    unsigned char *blk[5];
    float *out[5];
    for (int k = 0; k < 5; ++k)
        out[k] = output((size_t)count, shift, &blk[k]);
    CHECK(mg_relu(count, x, out[0], threads) == 0, "relu");
    CHECK(mg_relu_grad(count, g, x, out[1], threads) == 0, "relu_grad");
    CHECK(mg_apply_adam(count, var, m, v, g, 0.01f, 0.9f, 0.999f, 1e-7f, count % 2, out[2],
                        out[3], out[4], threads) == 0, "adam");
    for (int64_t i = 0; i < count; ++i) {
        CHECK(out[0][i] == (x[i] > 0 ? x[i] : 0.0f), "relu at %ld", (long)i);
        const float d = scalar_relu_grad(g[i], x[i]);
        CHECK(out[1][i] == (x[i] > 0 ? g[i] : 0.0f) && memcmp(&out[1][i], &d, sizeof d) == 0,
              "relu_grad at %ld", (long)i);
        const float mi = m[i] + (g[i] - m[i]) * (1.0f - 0.9f);
        CHECK(fabsf(out[3][i] - mi) <= 1e-6f, "adam m at %ld", (long)i);
    }
    for (int k = 0; k < 5; ++k) {
        check_guards(blk[k], (size_t)count, shift, "elementwise");
        free(blk[k]);
    }
    /* Relu6 and Relu6Grad over [-8, 8) with the edges (0, -0, 6, NaN, inf) in */
    static const float edges[] = {0.0f, -0.0f, 6.0f, -6.0f, 5.9999995f, 6.0000005f, 1e-30f,
                                  NAN, -NAN, INFINITY, -INFINITY};
    for (int64_t i = 0; i < count; ++i)
        x[i] = i < (int64_t)(sizeof edges / sizeof edges[0]) ? edges[i] : 8.0f * x[i];
    for (int k = 0; k < 2; ++k)
        out[k] = output((size_t)count, shift, &blk[k]);
    CHECK(mg_relu6(count, x, out[0], threads) == 0, "relu6");
    CHECK(mg_relu6_grad(count, g, x, out[1], threads) == 0, "relu6_grad");
    for (int64_t i = 0; i < count; ++i) {
        const float r6 = isnan(x[i]) ? x[i] : fminf(fmaxf(x[i], 0.0f), 6.0f);
        const int same = isnan(r6) ? isnan(out[0][i]) : out[0][i] == r6 && !signbit(out[0][i]);
        CHECK(same, "relu6 at %ld: %g -> %g", (long)i, (double)x[i], (double)out[0][i]);
        /* bit for bit the list's scalar expression; g where 0 < x < 6, else a zero */
        const float d6 = scalar_relu6_grad(g[i], x[i]);
        CHECK(memcmp(&out[1][i], &d6, sizeof d6) == 0, "relu6_grad at %ld: %g, %g -> %g",
              (long)i, (double)x[i], (double)g[i], (double)out[1][i]);
        CHECK(out[1][i] == (x[i] > 0.0f && x[i] < 6.0f ? g[i] : 0.0f),
              "relu6_grad value at %ld", (long)i);
    }
    for (int k = 0; k < 2; ++k) {
        check_guards(blk[k], (size_t)count, shift, "relu6");
        free(blk[k]);
    }
    free(x);
    free(g);
    free(m);
    free(v);
    free(var);
}

/* |y - exact| in ulps of the float32 result (the subnormals' spacing below 2^-126) */
static double ulp_error(float y, double exact)
{
    if (isnan(exact) || isinf(exact))
        return (isnan(exact) ? isnan(y) : y == exact) ? 0.0 : INFINITY;
    int e;
    frexp(exact, &e);
    return fabs((double)y - exact) / ldexp(1.0, e - 24 < -149 ? -149 : e - 24);
}

static double sigmoid_ref(double x) { return 1.0 / (1.0 + exp(-x)); }
static double elu_ref(double x) { return x < 0 ? expm1(x) : x; }
static double selu_ref(double x)
{
    return x < 0 ? 1.7580993408473768599 * expm1(x) : 1.0507009873554804934 * x;
}
static double softplus_ref(double x) { return (x > 0 ? x : 0) + log1p(exp(-fabs(x))); }

/* The exponential activations within their bounds, LeakyRelu and Softsign exactly, over
 * [-30, 30) with the edges (0, -0, inf, NaN, subnormals, the ends of exp's range) in */
static void exponential_case(int64_t count, int threads, int shift)
{
    typedef int (*unary)(int64_t, const float *, float *, int);
    static const struct {
        const char *name;
        unary run;
        double (*exact)(double);
        double bound;
    } acts[] = {{"sigmoid", mg_sigmoid, sigmoid_ref, 3}, {"tanh", mg_tanh, tanh, 3},
                {"elu", mg_elu, elu_ref, 1}, {"selu", mg_selu, selu_ref, 2},
                {"softplus", mg_softplus, softplus_ref, 3}};
    static const float edges[] = {0.0f, -0.0f, NAN, INFINITY, -INFINITY, 1e-40f, -1e-40f,
                                  -88.8f, -103.9f, -104.5f, 88.7f, 89.5f, 0.55f, -0.55f};
    float *x = input((size_t)count);
    for (int64_t i = 0; i < count; ++i)
        x[i] = i < (int64_t)(sizeof edges / sizeof edges[0]) ? edges[i] : 30.0f * x[i];
    unsigned char *blk;
    for (size_t k = 0; k < sizeof acts / sizeof acts[0]; ++k) {
        float *y = output((size_t)count, shift, &blk);
        CHECK(acts[k].run(count, x, y, threads) == 0, "%s", acts[k].name);
        for (int64_t i = 0; i < count; ++i) {
            const double err = ulp_error(y[i], acts[k].exact((double)x[i]));
            CHECK(err <= acts[k].bound, "%s(%a) = %a: %g ulp", acts[k].name, (double)x[i],
                  (double)y[i], err);
        }
        check_guards(blk, (size_t)count, shift, acts[k].name);
        free(blk);
    }
    float *y = output((size_t)count, shift, &blk);
    CHECK(mg_leaky_relu(count, x, y, 0.3f, threads) == 0, "leaky_relu");
    for (int64_t i = 0; i < count; ++i) {
        const float want = x[i] > 0.0f ? x[i] : x[i] * 0.3f;
        CHECK(memcmp(&y[i], &want, sizeof want) == 0 || (isnan(want) && isnan(y[i])),
              "leaky_relu at %ld", (long)i);
    }
    check_guards(blk, (size_t)count, shift, "leaky_relu");
    free(blk);
    y = output((size_t)count, shift, &blk);
    CHECK(mg_softsign(count, x, y, threads) == 0, "softsign");
    for (int64_t i = 0; i < count; ++i) {
        const float want = x[i] / (1.0f + fabsf(x[i]));
        CHECK(memcmp(&y[i], &want, sizeof want) == 0 || (isnan(want) && isnan(y[i])),
              "softsign at %ld", (long)i);
    }
    check_guards(blk, (size_t)count, shift, "softsign");
    free(blk);
    free(x);
}

/* The scalar result of broadcast op `op` (MG_BROADCAST_OPS' own expressions) */
static float broadcast_want(int op, float a, float b)
{
    switch (op) {
#define BC_CASE(name, expr)                                                                 \
    case BC_##name:                                                                         \
        return expr;
        MG_BROADCAST_OPS(BC_CASE)
#undef BC_CASE
    }
    return 0.0f;
}

/* z = x OP y broadcast, for every op of the list: exactly the scalar operation, element by
 * element (naive index arithmetic), z between guard bytes, inputs at their exact sizes */
static void broadcast_case(int rank, const int64_t *dims, const int64_t *x_dims,
                           const int64_t *y_dims, int threads, int shift)
{
    int64_t count = 1, x_count = 1, y_count = 1;
    for (int d = 0; d < rank; ++d) {
        count *= dims[d];
        x_count *= x_dims[d];
        y_count *= y_dims[d];
    }
    float *x = input((size_t)x_count), *y = input((size_t)y_count);
    for (int op = 0; op < mg_broadcast_op_count(); ++op) {
        unsigned char *blk;
        float *z = output((size_t)count, shift, &blk);
        CHECK(mg_broadcast(op, rank, dims, x_dims, y_dims, x, y, z, threads) == 0, "%s",
              mg_broadcast_op_name(op));
        for (int64_t i = 0; i < count; ++i) {
            int64_t rest = i, xi = 0, yi = 0, xs = 1, ys = 1;
            for (int d = rank - 1; d >= 0; --d) {
                const int64_t k = rest % dims[d];
                rest /= dims[d];
                xi += (x_dims[d] == 1 ? 0 : k) * xs;
                yi += (y_dims[d] == 1 ? 0 : k) * ys;
                xs *= x_dims[d];
                ys *= y_dims[d];
            }
            const float a = x[xi], b = y[yi];
            const float want = broadcast_want(op, a, b);
            CHECK(memcmp(&z[i], &want, sizeof want) == 0, "%s at %ld",
                  mg_broadcast_op_name(op), (long)i);
        }
        check_guards(blk, (size_t)count, shift, mg_broadcast_op_name(op));
        free(blk);
    }
    free(x);
    free(y);
}

int main(void)
{
    static const int64_t convs[][7] = {
        /* n, h, w, c, co, kh, kw */
        {2, 8, 8, 32, 64, 3, 3}, {3, 8, 8, 1, 32, 3, 3}, {1, 7, 5, 3, 5, 3, 3},
        {2, 7, 5, 17, 33, 3, 3}, {1, 5, 7, 1, 1, 1, 1}, {3, 6, 4, 3, 1, 2, 3},
        {2, 9, 4, 17, 64, 5, 3}, {1, 4, 5, 5, 130, 3, 3}, {2, 1, 1, 3, 17, 3, 3},
    };
    static const int64_t pools[][6] = {
        /* n, h, w, c, k, s */
        {2, 8, 8, 64, 2, 2}, {1, 7, 5, 1, 2, 2}, {2, 7, 5, 3, 2, 2}, {3, 6, 7, 17, 3, 3},
        {2, 7, 9, 70, 2, 3}, {2, 9, 8, 4, 3, 2}, {2, 6, 37, 3, 2, 2}, {1, 5, 64, 2, 2, 2},
        {2, 4, 2, 3, 2, 2}, {3, 6, 4, 5, 2, 2}, {1, 4, 16, 7, 2, 2}, {2, 2, 32, 3, 2, 2},
        /* windows far larger than the image: clipped, so as fast as small ones */
        {2, 8, 8, 3, 3000, 1}, {1, 5, 7, 16, 3000, 3000}, {2, 3, 9, 1, 1000000000, 2},
    };
    static const int64_t depthwise[][11] = {
        /* n, h, w, c, mult, kh, kw, stride, dilation, pad top, pad left */
        {2, 9, 9, 16, 1, 3, 3, 1, 1, 1, 1}, {2, 9, 8, 17, 1, 3, 3, 2, 1, 1, 1},
        {1, 7, 9, 48, 1, 3, 3, 2, 1, 0, 0}, {2, 6, 7, 5, 3, 3, 2, 1, 2, 2, 1},
        {1, 12, 13, 40, 1, 5, 5, 1, 1, 2, 2}, {3, 4, 5, 1, 7, 2, 3, 3, 1, 1, 0},
        {1, 3, 3, 24, 1, 7, 7, 1, 1, 5, 4}, {2, 1, 1, 3, 2, 3, 3, 1, 1, 1, 1},
        {2, 10, 40, 24, 1, 3, 3, 2, 1, 1, 1}, {1, 9, 41, 6, 2, 3, 3, 2, 2, 1, 2},
        {1, 5, 50, 3, 1, 3, 4, 3, 1, 2, 3},
        {4, 20, 20, 64, 1, 3, 3, 1, 1, 1, 1}, /* enough work for 3 threads */
    };
    static const int64_t conv_gemms[][14] = {
        /* n, h, w, c, co, kh, kw, groups, stride, dilation, pads top, left, bottom, right */
        {2, 8, 8, 32, 64, 3, 3, 1, 1, 1, 1, 1, 1, 1}, {1, 7, 5, 3, 5, 3, 3, 1, 2, 1, 0, 2, 1, 0},
        {2, 9, 7, 12, 40, 3, 2, 4, 1, 2, 2, 1, 2, 1}, {1, 5, 6, 300, 33, 1, 1, 1, 2, 1, 0, 0, 0, 0},
        {2, 6, 6, 100, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1}, {1, 4, 4, 90, 9, 2, 2, 3, 1, 3, 3, 3, 0, 0},
        {3, 10, 10, 16, 32, 3, 3, 2, 1, 1, 1, 1, 1, 1}, /* enough work for 3 threads */
    };
    int shift = 0;
    for (int isa = MG_ISA_SCALAR; isa <= MG_ISA_AVX512; ++isa) {
        if (mg_set_isa(isa) != isa)
            continue;
        for (int threads = 1; threads <= 3; threads += 2)
            for (size_t i = 0; i < sizeof conv_gemms / sizeof conv_gemms[0]; ++i, shift = (shift + 1) % 16)
                conv_gemm_case(conv_gemms[i], threads, shift);
        for (int threads = 1; threads <= 3; threads += 2)
            for (int cl = 0; cl < 2; ++cl)
                for (int same = 0; same < 2; ++same) {
                    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; ++i, shift = (shift + 1) % 16)
                        conv_case(convs[i][0], convs[i][1], convs[i][2], convs[i][3],
                                  convs[i][4], convs[i][5], convs[i][6], same, cl, threads,
                                  shift);
                    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; ++i, shift = (shift + 1) % 16)
                        pool_case(pools[i][0], pools[i][1], pools[i][2], pools[i][3],
                                  pools[i][4], pools[i][5], same, cl, threads, shift);
                }
        for (int threads = 1; threads <= 3; threads += 2)
            for (size_t i = 0; i < sizeof depthwise / sizeof depthwise[0]; ++i, shift = (shift + 1) % 16) {
                const int64_t *g = depthwise[i];
                depthwise_case(g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9],
                               g[10], threads, shift);
            }
        for (int64_t count = 0; count < 70; count += 7) {
            elementwise_case(count, 1, (int)(count % 16));
            exponential_case(count, 1, (int)(count % 16));
        }
        elementwise_case(100003, 3, 5);
        exponential_case(100003, 3, 5);
        static const int64_t shapes[][3][3] = {
            /* dims, x_dims, y_dims (rank 3; merged shapes as Python passes them) */
            {{5, 7, 3}, {5, 7, 3}, {5, 7, 3}}, {{5, 7, 3}, {1, 7, 3}, {5, 7, 1}},
            {{1, 33, 17}, {1, 33, 17}, {1, 1, 17}}, {{4, 5, 19}, {4, 1, 19}, {4, 5, 19}},
            {{3, 1, 1}, {3, 1, 1}, {1, 1, 1}}, {{2, 6, 1}, {1, 1, 1}, {2, 6, 1}},
            {{41, 64, 17}, {41, 64, 17}, {1, 64, 1}}, /* 44608: three threads */
        };
        for (int threads = 1; threads <= 3; threads += 2)
            for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i, shift = (shift + 1) % 16)
                broadcast_case(3, shapes[i][0], shapes[i][1], shapes[i][2], threads, shift);
    }
    /* bad arguments */
    float one = 1.0f;
    CHECK(mg_conv2d_forward(1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, &one, &one, &one, NULL, 1) ==
              MG_EINVAL, "c = 0 accepted");
    CHECK(mg_conv2d_backprop_input(1, 3, 3, 1, 3, 3, 1, 3, 0, 1, 1, 1, &one, &one, &one, 1) ==
              MG_EINVAL, "pad_top >= kh accepted");
    /* windows that would start past the image (out_h, out_w too large for h, w) */
    CHECK(mg_max_pool(1, 4, 4, 1, 2, 2, 2, 2, 0, 0, 3, 2, 1, &one, &one, 1) == MG_EINVAL,
          "out_h past the image accepted");
    CHECK(mg_max_pool(1, 4, 4, 1, 2, 2, 2, 2, 0, 0, 2, 3, 0, &one, &one, 1) == MG_EINVAL,
          "out_w past the image accepted");
    CHECK(mg_max_pool_grad(1, 4, 4, 1, 2, 2, 2, 2, 0, 0, 3, 2, 1, &one, &one, &one, 1) ==
              MG_EINVAL, "max_pool_grad out_h past the image accepted");
    CHECK(mg_depthwise_forward(1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 1, 1, &one, &one, &one,
                               1) == MG_EINVAL, "depthwise multiplier 0 accepted");
    CHECK(mg_depthwise_backprop_input(1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1, &one, &one,
                                      &one, 1) == MG_EINVAL, "depthwise stride 0 accepted");
    CHECK(mg_depthwise_backprop_filter(1, 1, 1, 1, 1, 1, 1, 1, 1, (int64_t)1 << 31, 1, 0, 0, 1,
                                       1, &one, &one, &one, 1) == MG_EINVAL,
          "depthwise dilation 2^31 accepted");
    CHECK(mg_depthwise_forward(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, NULL, &one, &one,
                               1) == MG_EINVAL, "depthwise NULL input accepted");
    CHECK(mg_relu6(-1, &one, &one, 1) == MG_EINVAL, "relu6 count < 0 accepted");
    CHECK(mg_relu6_grad(3, &one, NULL, &one, 1) == MG_EINVAL, "relu6_grad NULL accepted");
    CHECK(mg_leaky_relu(-1, &one, &one, 0.2f, 1) == MG_EINVAL, "leaky_relu count < 0 accepted");
    const int64_t two = 2, three = 3;
    CHECK(mg_broadcast(0, 1, &three, &two, &three, &one, &one, &one, 1) == MG_EINVAL,
          "broadcast of 2 against 3 accepted");
    CHECK(mg_broadcast(0, 1, &two, &two, &two, NULL, &one, &one, 1) == MG_EINVAL,
          "broadcast NULL accepted");
    CHECK(mg_apply_adam(2, &one, &one, &one, NULL, 0.1f, 0.9f, 0.999f, 1e-7f, 0, &one, &one,
                        &one, 1) == MG_EINVAL, "adam NULL accepted");
    CHECK(mg_max_pool(1, 4, 4, 1, (int64_t)1 << 40, 2, 1, 2, 0, 0, 4, 2, 1, &one, &one, 1) ==
              MG_EINVAL, "a window of 2^40 rows accepted");
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("nn asan driver: all checks passed\n");
    return 0;
}

/* Batch-normalization kernels of minigraph's OpenCL backend (minigraph/backends/opencl.py).
 *
 * Every tensor is viewed as [outer, C, inner]: NHWC/NDHWC have inner = 1, NCHW/NCDHW have
 * outer = N and inner = D*H*W. Element e of channel c (e in [0, n), n = outer * inner) sits at
 * address (e / inner * C + c) * inner + e % inner. Per-channel vectors are float32.
 *
 * Build options:
 *   -DSTORAGE_F32 | -DSTORAGE_F16 | -DSTORAGE_BF16   storage type of the big tensors; all
 *       math is float32, each result is rounded once (half: vstore_half_rte; bfloat16:
 *       round to nearest even on the upper 16 bits)
 *   -DIDX=uint | -DIDX=ulong                          index type (uint when it fits)
 *   -DACC_F64                                         accumulate sums in double (devices
 *       with cl_khr_fp64); otherwise in float
 *
 * Reductions are two-stage and deterministic: stage 1 (partial_*) gives each work-group a
 * block of LC channels x a chunk of the n elements; its LR work-items per channel accumulate
 * strided elements in registers, then a fixed tree in local memory sums them and the group
 * writes partials[(t * G + g) * C + c] for each term t. Stage 2 (finish_*, one work-item per
 * channel) adds the G partials in order. Same shape and device: bitwise the same result.
 *
 * The terms are float32 values computed exactly as the numpy reference computes them; with
 * ACC_F64 they are summed in double (acc_t) and the per-channel totals rounded to float32
 * where the reference rounds them, as the reference sums float32 terms in float64. That is
 * what makes non-finite and huge inputs agree: a double sum of finite float32 terms never
 * overflows (float32 sums of values near 3.4e38 do, and partial sums of +inf and -inf in
 * different groups would give NaN where the whole sum is finite or +-inf), and infinities
 * and NaNs propagate through a double sum the same way in any order.
 * Contraction into fma is off so the rounding matches the numpy reference step by step.
 */
#pragma OPENCL FP_CONTRACT OFF

#if defined(STORAGE_F32)
typedef float storage_t;
#define LOAD(p, i) ((p)[i])
#define STORE(p, i, v) ((p)[i] = (v))
#elif defined(STORAGE_F16)
typedef half storage_t;
#define LOAD(p, i) vload_half((i), (p))
#define STORE(p, i, v) vstore_half_rte((v), (i), (p))
#elif defined(STORAGE_BF16)
typedef ushort storage_t;
#define LOAD(p, i) as_float((uint)(p)[i] << 16)
#define STORE(p, i, v) ((p)[i] = float_to_bfloat16(v))

/* Round to nearest even; NaN stays a (quiet) NaN of the same sign. */
inline ushort float_to_bfloat16(float v) {
    uint bits = as_uint(v);
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return (ushort)((bits >> 16) | 0x0040u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (ushort)(bits >> 16);
}
#else
#error "define STORAGE_F32, STORAGE_F16 or STORAGE_BF16"
#endif

#ifndef IDX
#define IDX uint
#endif

#if defined(ACC_F64)
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
typedef double acc_t;
#else
typedef float acc_t;
#endif

inline float rsqrt_exact(float v) { return 1.0f / sqrt(v); }

/* --------------------------------------------------------------------- addressing */

inline IDX address_of(IDX e, IDX c, IDX C, IDX inner) {
    return inner == 1 ? e * C + c : (e / inner * C + c) * inner + e % inner;
}

/* --------------------------------------------------------------------- reduction stage 1 */

/* The elements [begin, end) of this work-group's chunk, visited begin, begin + step, ... */
typedef struct {
    IDX c, begin, end, step;
    bool active;
} span_t;

inline span_t my_span(IDX C, IDX n, IDX chunk) {
    span_t s;
    s.c = get_global_id(0);
    s.active = s.c < C;
    s.begin = (IDX)get_group_id(1) * chunk + (IDX)get_local_id(1);
    s.end = min((IDX)(get_group_id(1) + 1) * chunk, n);
    s.step = get_local_size(1);
    return s;
}

/* Sums acc[0..nterms) over the LR work-items of each channel lane (a fixed tree; LR is a
 * power of two) and stores the group's partials. Every work-item of the group must call it. */
inline void store_partials(const acc_t *acc, const int nterms, __local acc_t *scratch,
                           __global acc_t *partials, const span_t s, const IDX C) {
    const size_t lc = get_local_id(0), lr = get_local_id(1);
    const size_t LC = get_local_size(0), LR = get_local_size(1);
    for (int t = 0; t < nterms; ++t)
        scratch[(t * LR + lr) * LC + lc] = acc[t];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (size_t half_size = LR / 2; half_size > 0; half_size /= 2) {
        if (lr < half_size)
            for (int t = 0; t < nterms; ++t)
                scratch[(t * LR + lr) * LC + lc] += scratch[(t * LR + lr + half_size) * LC + lc];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lr == 0 && s.active) {
        const IDX G = get_num_groups(1), g = get_group_id(1);
        for (int t = 0; t < nterms; ++t)
            partials[((IDX)t * G + g) * C + s.c] = scratch[(t * LR) * LC + lc];
    }
}

/* t0 = x */
__kernel void partial_sum(__global const storage_t *x, const IDX C, const IDX inner,
                          const IDX n, const IDX chunk, __global acc_t *partials,
                          __local acc_t *scratch) {
    const span_t s = my_span(C, n, chunk);
    acc_t acc[1] = {0};
    if (s.active)
        for (IDX e = s.begin; e < s.end; e += s.step)
            acc[0] += LOAD(x, address_of(e, s.c, C, inner));
    store_partials(acc, 1, scratch, partials, s, C);
}

/* t0 = (x - mean)^2: the second pass of the two-pass variance */
__kernel void partial_centered_squares(__global const storage_t *x,
                                       __global const float *mean, const IDX C,
                                       const IDX inner, const IDX n, const IDX chunk,
                                       __global acc_t *partials, __local acc_t *scratch) {
    const span_t s = my_span(C, n, chunk);
    acc_t acc[1] = {0};
    if (s.active) {
        const float m = mean[s.c];
        for (IDX e = s.begin; e < s.end; e += s.step) {
            const float d = LOAD(x, address_of(e, s.c, C, inner)) - m;
            acc[0] += d * d;
        }
    }
    store_partials(acc, 1, scratch, partials, s, C);
}

/* t0 = dy, t1 = dy * (x - mean) */
__kernel void partial_backward(__global const storage_t *dy, __global const storage_t *x,
                               __global const float *mean, const IDX C, const IDX inner,
                               const IDX n, const IDX chunk, __global acc_t *partials,
                               __local acc_t *scratch) {
    const span_t s = my_span(C, n, chunk);
    acc_t acc[2] = {0, 0};
    if (s.active) {
        const float m = mean[s.c];
        for (IDX e = s.begin; e < s.end; e += s.step) {
            const IDX i = address_of(e, s.c, C, inner);
            const float g = LOAD(dy, i);
            acc[0] += g;
            acc[1] += g * (LOAD(x, i) - m);
        }
    }
    store_partials(acc, 2, scratch, partials, s, C);
}

/* With xh = (x - mean) * rsqrt(variance + epsilon):
 * t0 = dy, t1 = gx, t2 = dy * xh, t3 = gx * xh, t4 = gx * dy */
__kernel void partial_grad_grad(__global const storage_t *dy, __global const storage_t *x,
                                __global const storage_t *gx, __global const float *mean,
                                __global const float *variance, const float epsilon,
                                const IDX C, const IDX inner, const IDX n, const IDX chunk,
                                __global acc_t *partials, __local acc_t *scratch) {
    const span_t s = my_span(C, n, chunk);
    acc_t acc[5] = {0, 0, 0, 0, 0};
    if (s.active) {
        const float m = mean[s.c], r = rsqrt_exact(variance[s.c] + epsilon);
        for (IDX e = s.begin; e < s.end; e += s.step) {
            const IDX i = address_of(e, s.c, C, inner);
            const float g = LOAD(dy, i), h = LOAD(gx, i), xh = (LOAD(x, i) - m) * r;
            acc[0] += g;
            acc[1] += h;
            acc[2] += g * xh;
            acc[3] += h * xh;
            acc[4] += h * g;
        }
    }
    store_partials(acc, 5, scratch, partials, s, C);
}

/* t0 = a * b */
__kernel void partial_product(__global const storage_t *a, __global const storage_t *b,
                              const IDX C, const IDX inner, const IDX n, const IDX chunk,
                              __global acc_t *partials, __local acc_t *scratch) {
    const span_t s = my_span(C, n, chunk);
    acc_t acc[1] = {0};
    if (s.active)
        for (IDX e = s.begin; e < s.end; e += s.step) {
            const IDX i = address_of(e, s.c, C, inner);
            acc[0] += LOAD(a, i) * LOAD(b, i);
        }
    store_partials(acc, 1, scratch, partials, s, C);
}

/* --------------------------------------------------------------------- reduction stage 2 */

inline acc_t total_of(__global const acc_t *partials, const int t, const IDX G, const IDX C,
                      const IDX c) {
    acc_t sum = 0;
    for (IDX g = 0; g < G; ++g)
        sum += partials[((IDX)t * G + g) * C + c];
    return sum;
}

/* out = f32(t0 / count): the mean (first pass) or the biased variance (second pass) */
__kernel void finish_mean(__global const acc_t *partials, const IDX G, const IDX C,
                          const acc_t count, __global float *out) {
    const IDX c = get_global_id(0);
    if (c < C)
        out[c] = (float)(total_of(partials, 0, G, C, c) / count);
}

/* total = f32(t0), out = total * rsqrt(variance + epsilon) */
__kernel void finish_scaled_sum(__global const acc_t *partials, const IDX G, const IDX C,
                                __global const float *variance, const float epsilon,
                                __global float *total, __global float *out) {
    const IDX c = get_global_id(0);
    if (c >= C)
        return;
    total[c] = (float)total_of(partials, 0, G, C, c);
    out[c] = total[c] * rsqrt_exact(variance[c] + epsilon);
}

/* offset_backprop = f32(sum(dy)); sum_dy_xc = f32(sum(dy * (x - mean)));
 * scale_backprop = sum_dy_xc * rsqrt(variance + epsilon) */
__kernel void finish_backward(__global const acc_t *partials, const IDX G, const IDX C,
                              __global const float *variance, const float epsilon,
                              __global float *offset_backprop, __global float *sum_dy_xc,
                              __global float *scale_backprop) {
    const IDX c = get_global_id(0);
    if (c >= C)
        return;
    const float s1 = (float)total_of(partials, 1, G, C, c);
    offset_backprop[c] = (float)total_of(partials, 0, G, C, c);
    sum_dy_xc[c] = s1;
    scale_backprop[c] = s1 * rsqrt_exact(variance[c] + epsilon);
}

/* means[t * C + c] = f32(t_t / count) (mdy, mgx, mdyxh, mgxxh, mgxdy);
 * d_scale = (r * f32(count)) * (mgxdy - mgx * mdy - mgxxh * mdyxh) */
__kernel void finish_grad_grad(__global const acc_t *partials, const IDX G, const IDX C,
                               const acc_t count, __global const float *variance,
                               const float epsilon, __global float *means,
                               __global float *d_scale) {
    const IDX c = get_global_id(0);
    if (c >= C)
        return;
    float m[5];
    for (int t = 0; t < 5; ++t) {
        m[t] = (float)(total_of(partials, t, G, C, c) / count);
        means[(IDX)t * C + c] = m[t];
    }
    d_scale[c] = rsqrt_exact(variance[c] + epsilon) * (float)count
                 * (m[4] - m[1] * m[0] - m[3] * m[2]);
}

/* --------------------------------------------------------------------- elementwise
 *
 * A 2-D range over the tensor as [outer rows, C * inner columns]: work-item (j, r) takes
 * column j (channel j / inner: no per-element division) of row r, and of rows r + R,
 * r + 2R... when the rows outnumber the range (R = global size 1). Neighbouring work-items
 * touch neighbouring columns.
 */

#define FOR_EACH_ROW(i) \
    for (IDX i = (IDX)get_global_id(1) * row + j; i < total; i += (IDX)get_global_size(1) * row)

#define COLUMN_PROLOGUE \
    const IDX row = C * inner, j = get_global_id(0); \
    if (j >= row) \
        return; \
    const IDX c = inner == 1 ? j : j / inner;

/* y = (x - mean) * (scale * rsqrt(variance + epsilon)) + offset */
__kernel void apply_normalize(__global const storage_t *x, __global const float *mean,
                              __global const float *variance, __global const float *scale,
                              __global const float *offset, const float epsilon, const IDX C,
                              const IDX inner, const IDX total, __global storage_t *y) {
    COLUMN_PROLOGUE
    const float m = mean[c], factor = scale[c] * rsqrt_exact(variance[c] + epsilon);
    const float b = offset[c];
    FOR_EACH_ROW(i) STORE(y, i, (LOAD(x, i) - m) * factor + b);
}

/* dx = scale*r * (dy - sum_dy/n - (x - mean) * ((sum_dy_xc/n) * r * r)), r = rsqrt(var + eps) */
__kernel void apply_backward_training(__global const storage_t *dy,
                                      __global const storage_t *x, __global const float *scale,
                                      __global const float *mean,
                                      __global const float *variance, const float epsilon,
                                      __global const float *sum_dy,
                                      __global const float *sum_dy_xc, const float count,
                                      const IDX C, const IDX inner, const IDX total,
                                      __global storage_t *dx) {
    COLUMN_PROLOGUE
    const float r = rsqrt_exact(variance[c] + epsilon), m = mean[c];
    const float k = scale[c] * r, m_dy = sum_dy[c] / count;
    const float projection = sum_dy_xc[c] / count * r * r;
    FOR_EACH_ROW(i) STORE(dx, i, k * (LOAD(dy, i) - m_dy - (LOAD(x, i) - m) * projection));
}

/* dx = dy * (scale * rsqrt(variance + epsilon)) */
__kernel void apply_backward_inference(__global const storage_t *dy,
                                       __global const float *scale,
                                       __global const float *variance, const float epsilon,
                                       const IDX C, const IDX inner, const IDX total,
                                       __global storage_t *dx) {
    COLUMN_PROLOGUE
    const float k = scale[c] * rsqrt_exact(variance[c] + epsilon);
    FOR_EACH_ROW(i) STORE(dx, i, LOAD(dy, i) * k);
}

/* Second order, training (statistics of x; means from finish_grad_grad), xh = (x - mu) r:
 * d_dy = scale r (gx - mgx - xh mgxxh) + gscale xh + goffset
 * d_x  = -scale r^2 (xh (mgxdy - mgx mdy - 3 mdyxh mgxxh) + mgxxh (dy - mdy)
 *                    + mdyxh (gx - mgx)) + gscale r (dy - mdy - xh mdyxh) */
__kernel void apply_grad_grad_training(__global const storage_t *dy,
                                       __global const storage_t *x,
                                       __global const storage_t *gx,
                                       __global const float *scale,
                                       __global const float *gscale,
                                       __global const float *goffset,
                                       __global const float *mean,
                                       __global const float *variance, const float epsilon,
                                       __global const float *means, const IDX C,
                                       const IDX inner, const IDX total,
                                       __global storage_t *d_dy, __global storage_t *d_x) {
    COLUMN_PROLOGUE
    const float m_dy = means[c], m_gx = means[C + c], m_dy_xh = means[2 * C + c];
    const float m_gx_xh = means[3 * C + c], m_gx_dy = means[4 * C + c];
    const float r = rsqrt_exact(variance[c] + epsilon), s = scale[c], gs = gscale[c];
    const float m = mean[c], b = goffset[c], sr = s * r, nsrr = -s * r * r, gsr = gs * r;
    const float cross = m_gx_dy - m_gx * m_dy - 3.0f * m_dy_xh * m_gx_xh;
    FOR_EACH_ROW(i) {
        const float g = LOAD(dy, i), h = LOAD(gx, i), xh = (LOAD(x, i) - m) * r;
        STORE(d_dy, i, sr * (h - m_gx - xh * m_gx_xh) + gs * xh + b);
        STORE(d_x, i, nsrr * (xh * cross + m_gx_xh * (g - m_dy) + m_dy_xh * (h - m_gx))
                          + gsr * (g - m_dy - xh * m_dy_xh));
    }
}

/* Second order, inference, r = rsqrt(variance + epsilon):
 * d_dy = gx (scale r) + gscale (x - mean) r + goffset;  d_x = gscale dy r */
__kernel void apply_grad_grad_inference(__global const storage_t *dy,
                                        __global const storage_t *x,
                                        __global const storage_t *gx,
                                        __global const float *scale,
                                        __global const float *gscale,
                                        __global const float *goffset,
                                        __global const float *mean,
                                        __global const float *variance, const float epsilon,
                                        const IDX C, const IDX inner, const IDX total,
                                        __global storage_t *d_dy, __global storage_t *d_x) {
    COLUMN_PROLOGUE
    const float r = rsqrt_exact(variance[c] + epsilon), gs = gscale[c];
    const float sr = scale[c] * r, m = mean[c], b = goffset[c];
    FOR_EACH_ROW(i) {
        STORE(d_dy, i, LOAD(gx, i) * sr + gs * (LOAD(x, i) - m) * r + b);
        STORE(d_x, i, gs * LOAD(dy, i) * r);
    }
}

/* --------------------------------------------------------------------- conversions */

__kernel void to_float(__global const storage_t *src, const IDX total, __global float *dst) {
    const IDX i = get_global_id(0);
    if (i < total)
        dst[i] = LOAD(src, i);
}

__kernel void from_float(__global const float *src, const IDX total, __global storage_t *dst) {
    const IDX i = get_global_id(0);
    if (i < total)
        STORE(dst, i, src[i]);
}

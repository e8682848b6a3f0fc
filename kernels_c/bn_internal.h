/* Internals shared by the driver (batch_norm.c) and the per-ISA run kernels (bn_isa_*.c).
 *
 * A "run" is a contiguous stretch of `len` tensor elements. In a row run, element e has the
 * position p = (e - head) mod period, which indexes position arrays: coefficients k[i][p]
 * (float32, read-only) and accumulators acc[i][p] (float32, added to); they hold the period
 * rounded up to the vector width plus 8 vectors, zero-padded. A plane run is a few segments
 * of one channel each (see bn_run_table). The driver maps positions and segments to
 * channels; the run kernels never see channels, layouts or threads, so they are the only
 * code written per ISA and per dtype (bn_runs_template.h, instantiated 3 x 3 times).
 */
#ifndef MINIGRAPH_BN_INTERNAL_H
#define MINIGRAPH_BN_INTERNAL_H

#include <stdint.h>

#include "mg_runtime.h" /* MG_X86 */

#define BN_NCOEF 9
#define BN_NACC 7

typedef struct {
    const void *x, *dy, *gx; /* inputs at the start of the run */
    const void *dy2;         /* BN_BWD_SUMS_RELU_ADD: added to dy (else NULL) */
    void *out0, *out1;       /* outputs at the start of the run */
    int64_t len;             /* elements in the run (plane runs: in each segment) */
    int64_t period;          /* row runs: positions per row: a multiple of the vector width,
                                or long rows ending with a masked vector */
    int64_t head;            /* row runs: elements before position 0 (they have positions
                                period - head .. period - 1), < vector width; 0 if chunks */
    int64_t nseg, seg_stride; /* plane runs: nseg segments, seg_stride elements apart */
    int chunks;              /* row runs that accumulate: 1 walks the run in chunks of a few
                                vectors with sums in registers (fast from cache), 0 in memory
                                order adding to the position arrays (fast from memory); the
                                same sums, bit for bit (bn_runs_template.h) */
    int stream;              /* 1: whole vectors are stored non-temporally (see
                                bn_runs_template.h's BN_STREAMING); plane runs that only
                                write start each segment with a masked head up to the first
                                aligned output element */
    const float *k[BN_NCOEF];
    float *acc[BN_NACC];
} bn_run_args;

typedef void (*bn_run_fn)(const bn_run_args *a);

/* Elements before the first `align`-byte aligned one at p (p a multiple of elsize), at most
 * len. */
static inline int64_t bn_align_head(const void *p, size_t align, size_t elsize, int64_t len)
{
    const size_t misalign = (uintptr_t)p % align;
    const int64_t head = misalign ? (int64_t)((align - misalign) / elsize) : 0;
    return head < len ? head : len;
}

/* Whether a plane run that sums walks its adjacent whole planes as one stretch
 * (bn_runs_template.h's BN_PLANE_SUM_WALK: planes of at least one and fewer than 16 vectors
 * of vlen floats). Its vectors lie on the grid of the run's start, not of an aligned head, so
 * it stores plainly: the driver never sets such a run to stream (block_stream), and the
 * choice depends on the shape alone, never on the buffers' alignment. */
static inline int bn_plane_sums_walk(const bn_run_args *a, int vlen, int nacc)
{
    return nacc > 0 && vlen > 1 && a->nseg > 1 && a->seg_stride == a->len && a->len >= vlen &&
           a->len < 16 * (int64_t)vlen;
}

/* Whether a run's outputs share a byte with its inputs (an in-place call): a run that may
 * be run twice (bn_runs_template.h's BN_DEFERRING) must not be. A run's tensors span its
 * segments: (nseg - 1) * seg_stride + len elements from their start (row runs: len). */
static inline int bn_outputs_overlap_inputs(const bn_run_args *a, size_t elsize)
{
    const int64_t span = (a->nseg > 1 ? (a->nseg - 1) * a->seg_stride : 0) + a->len;
    const uintptr_t bytes = (uintptr_t)span * elsize;
    const void *const outs[2] = {a->out0, a->out1}, *const ins[3] = {a->x, a->dy, a->gx};
    for (int o = 0; o < 2; ++o)
        for (int i = 0; i < 3; ++i)
            if (outs[o] && ins[i] && (uintptr_t)outs[o] < (uintptr_t)ins[i] + bytes &&
                (uintptr_t)ins[i] < (uintptr_t)outs[o] + bytes)
                return 1;
    return 0;
}

/* The run kernels. Formulas (xc = x - k0, dc = dy - k1, gc = gx - k2) are next to their
 * bodies in bn_runs_template.h. */
enum {
    BN_SUM_X,     /* acc0 += x                                                  */
    BN_DEV_X,     /* acc0 += xc; acc1 += xc^2                                   */
    BN_FWD_APPLY, /* out0 = xc * k1 + k2                                         */
    BN_BWD_SUMS,  /* acc0 += dy; acc1 += dy * xc                                 */
    BN_BWD_APPLY, /* out0 = k1 * (dy - k3) + k2 * xc                             */
    BN_BWD_INFER, /* BN_BWD_SUMS, and out0 = dy * k1                             */
    BN_GG_SUM,    /* acc0 += x; acc1 += dy; acc2 += gx                           */
    BN_GG_DEV,    /* acc0..2 += xc, dc, gc; acc3..6 += xc^2, dc*xc, gc*xc, gc*dc  */
    BN_GG_APPLY,  /* out0 = k3*gc + (k4*xc + k5); out1 = k6*xc + (k7*dc + k8*gc) */
    BN_GG_INFER,  /* out0 = (gx*k1 + (k2*xc)*k4) + k3; out1 = (k2*dy)*k4; acc0 += gx*dy */
    BN_FWD_APPLY_RELU,      /* out0 = relu(xc * k1 + k2)                              */
    BN_FWD_APPLY_SIDE,      /* out0 = (xc * k1 + k2) + dy   (dy: the side input)       */
    BN_FWD_APPLY_SIDE_RELU, /* out0 = relu((xc * k1 + k2) + dy)                        */
    BN_BWD_SUMS_RELU,  /* BN_BWD_SUMS of g = gx > 0 ? dy : dy * 0 (gx: the Relu output y); out1 = g where given */
    BN_BWD_APPLY_RELU, /* BN_BWD_APPLY of that g                                          */
    BN_BWD_SUMS_RELU_ADD, /* BN_BWD_SUMS_RELU of dy + dy2 (AddN's float32 sum); out1 = g */
    BN_NRUNS
};

/* One table per (ISA, dtype), two flavours of every run:
 *   row[]:   one contiguous run; k[i] and acc[i] are position arrays of `period` positions
 *            (see above);
 *   plane[]: nseg segments of one channel each; segment s uses the coefficients k[i][s]
 *            (broadcast) and OVERWRITES acc[i][s] with its sum (accumulated in registers);
 *            `period` is ignored. */
typedef struct {
    int vlen;
    bn_run_fn row[BN_NRUNS];
    bn_run_fn plane[BN_NRUNS];
} bn_run_table;

extern const bn_run_table bn_runs_scalar_f32, bn_runs_scalar_f16, bn_runs_scalar_bf16;
#if MG_X86
extern const bn_run_table bn_runs_avx2_f32, bn_runs_avx2_f16, bn_runs_avx2_bf16;
extern const bn_run_table bn_runs_avx512_f32, bn_runs_avx512_f16, bn_runs_avx512_bf16;
extern const bn_run_table bn_runs_avx512bf16_bf16; /* AVX-512 with AVX512-BF16 stores */
#endif

#endif

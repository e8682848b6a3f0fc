/* minigraph native batch-norm kernels: public C API.
 *
 * Every tensor is a C-contiguous array viewed as (outer, C, inner):
 *   channels-last  (NHWC/NDHWC): outer = prod(shape[:-1]), inner = 1
 *   channels-first (NCHW/NCDHW): outer = shape[0],         inner = prod(shape[2:])
 * The kernels never transpose. All tensor arguments of one call share `dtype` and shape;
 * per-channel vectors are float32 [C]. Math is float32 (per-channel sums are reduced in
 * float32 vectors per block, products added by fused multiply-adds, and combined in double,
 * in a fixed block order, so results are bit-identical for any thread count and buffer
 * alignment); float16/bfloat16 values are widened on load and
 * rounded once (to nearest even) on store. The formulas are next to each kernel in
 * batch_norm.c and in docs/tf-semantics.md#fusedbatchnormv3-forward,
 * docs/tf-semantics.md#fusedbatchnormgradv3 and docs/tf-semantics.md#autodiff-second-order.
 *
 * Return value (mg_runtime.h): MG_OK, MG_EINVAL for a bad dtype/size, MG_ENOMEM when a
 * scratch allocation failed. `num_threads` <= 1 runs on the calling thread only. The
 * instruction set is the runtime's (mg_isa, mg_set_isa).
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_BATCH_NORM_H
#define MINIGRAPH_BATCH_NORM_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
#define MG_BN_F32 0
#define MG_BN_F16 1
#define MG_BN_BF16 2

/* With the AVX-512 ISA, store bfloat16 with AVX512-BF16's conversion when the CPU has it
 * (enable = 1, the default) or with integer rounding only (0); the stored bits are the same
 * either way. Returns whether the AVX512-BF16 stores are in use (tests run both). */
int mg_bn_set_bf16_instructions(int enable);

/* Non-temporal stores of the element passes: mode -1 (the default) uses them when a call's
 * tensors exceed the last-level cache (mg_cache_size), 0 never, 1 wherever aligned (tests
 * compare all three: the stored bits are the same). Returns the mode now in use. */
int mg_bn_set_streaming(int mode);

int mg_bn_forward_training(int dtype, int64_t outer, int64_t channels, int64_t inner,
                           const void *x, const float *scale, const float *offset,
                           double epsilon, void *y, float *mean, float *variance,
                           int num_threads);

int mg_bn_forward_inference(int dtype, int64_t outer, int64_t channels, int64_t inner,
                            const void *x, const float *scale, const float *offset,
                            const float *mean, const float *variance, double epsilon,
                            void *y, int num_threads);

/* The training fusions (_FusedBatchNormEx / _FusedBatchNormGradEx, float32 bit for bit
 * the unfused ops): y = relu?((BN value) + side) with side NULL for none; the backward of
 * dy masked by the Relu output y (ReluGrad), its masked dy stored to side_backprop (NULL:
 * not stored). Empty tensors: as the plain kernels (side_backprop is then not written). */
int mg_bn_forward_training_ex(int dtype, int64_t outer, int64_t channels, int64_t inner,
                              const void *x, const float *scale, const float *offset,
                              double epsilon, const void *side, int relu, void *y,
                              float *mean, float *variance, int num_threads);

int mg_bn_forward_inference_ex(int dtype, int64_t outer, int64_t channels, int64_t inner,
                               const void *x, const float *scale, const float *offset,
                               const float *mean, const float *variance, double epsilon,
                               const void *side, int relu, void *y, int num_threads);

int mg_bn_backward_training_ex(int dtype, int64_t outer, int64_t channels, int64_t inner,
                               const void *dy, const void *x, const float *scale,
                               const float *mean, const float *variance, const void *y,
                               double epsilon, void *dx, void *side_backprop,
                               float *scale_backprop, float *offset_backprop, int num_threads);

/* The same for dy + dy2 (AddN -> ReluGrad -> the backward, float32 only); returns
 * MG_BN_UNFUSED, having written nothing meaningful, where a channel needs the exceptional
 * recomputation: the caller then adds the two and calls mg_bn_backward_training_ex. */
#define MG_BN_UNFUSED 3
int mg_bn_backward_training_ex_add(int dtype, int64_t outer, int64_t channels, int64_t inner,
                                   const void *dy, const void *dy2, const void *x,
                                   const float *scale, const float *mean, const float *variance,
                                   const void *y, double epsilon, void *dx,
                                   void *side_backprop, float *scale_backprop,
                                   float *offset_backprop, int num_threads);

int mg_bn_backward_training(int dtype, int64_t outer, int64_t channels, int64_t inner,
                            const void *dy, const void *x, const float *scale,
                            const float *mean, const float *variance, double epsilon,
                            void *dx, float *scale_backprop, float *offset_backprop,
                            int num_threads);

int mg_bn_backward_inference(int dtype, int64_t outer, int64_t channels, int64_t inner,
                             const void *dy, const void *x, const float *scale,
                             const float *mean, const float *variance, double epsilon,
                             void *dx, float *scale_backprop, float *offset_backprop,
                             int num_threads);

int mg_bn_grad_grad_training(int dtype, int64_t outer, int64_t channels, int64_t inner,
                             const void *dy, const void *x, const float *scale,
                             const void *gx, const float *gscale, const float *goffset,
                             double epsilon, void *d_dy, void *d_x, float *d_scale,
                             int num_threads);

int mg_bn_grad_grad_inference(int dtype, int64_t outer, int64_t channels, int64_t inner,
                              const void *dy, const void *x, const float *scale,
                              const float *mean, const float *variance,
                              const void *gx, const float *gscale, const float *goffset,
                              double epsilon, void *d_dy, void *d_x, float *d_scale,
                              int num_threads);
/* END CDEF */

#endif

/* minigraph native float32 GEMM: C = op(A) * B (+ a per-channel epilogue), the core of the
 * native MatMul and of the 1x1 convolutions (an NHWC input is a [pixels, C_in] matrix).
 *
 * B is packed once into panels of MG_GEMM_NR = 32 columns (mg_gemm_pack_b; a constant weight
 * matrix is packed once and reused: the Python side caches the packing of read-only arrays),
 * zero-padded to a whole panel; the packing is the same for every ISA. mg_gemm blocks over M
 * (equal blocks of at most 96 rows), K (256) and N (panels), reads A in place (rows 4 KiB
 * apart copied per K block, gemm.c), and runs a register-
 * blocked micro-kernel (AVX-512: 12 rows x 32 columns in 24 zmm accumulators; AVX2 + FMA: 6
 * x 16 twice; baseline: 4 x 32 with fmaf; a panel of at most 16 columns on the narrow
 * kernel, gemm_internal.h) over it; items of (M block, N block) go to the
 * worker pool (mg_pool_run).
 *
 * Summation order: every element is one chain of fused multiply-adds from +0 over k = 0, 1,
 * ..., K - 1 (a K block continues the chain from the float32 stored by the one before it,
 * which is exact), so a result is bit-identical for any thread count, block configuration and
 * ISA (the baseline uses fmaf, rounded once like the FMA instructions). Error bound of a
 * chain (recursive summation): |c - exact| <= K * 2^-24 * sum_k |a_ik b_kj| (1 + O(K 2^-24)).
 *
 * Tensors are C-contiguous float32: A is [m][k] ([k][m] when trans_a), B [k][n] ([n][k] when
 * trans_b), C [m][n]. Return value (mg_runtime.h): MG_OK, MG_EINVAL for bad sizes or a NULL
 * buffer, MG_ENOMEM when the per-thread scratch could not be allocated.
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_GEMM_H
#define MINIGRAPH_GEMM_H

#include <stdint.h>

#include "activations.h"
#include "mg_runtime.h"

/* BEGIN CDEF */
#define MG_GEMM_NR 32
/* Floats of B's packing for k x n (k * n rounded up to whole panels of MG_GEMM_NR columns),
 * or -1 for negative or too large sizes. */
int64_t mg_gemm_packed_floats(int64_t k, int64_t n);
/* Pack B ([k][n], or [n][k] when trans_b) into `packed` (mg_gemm_packed_floats(k, n)
 * floats): panel p holds rows 0 .. k - 1 of columns 32p .. 32p + 31, zero past n. */
int mg_gemm_pack_b(int64_t k, int64_t n, int trans_b, const float *b, float *packed,
                   int num_threads);
/* c [m][n] = op(a) * B with B packed by mg_gemm_pack_b(k, n, ...); then `epilogue` (NULL:
 * none) as mg_channel_epilogue applies it (bit for bit the unfused ops). */
int mg_gemm(int64_t m, int64_t n, int64_t k, int trans_a, const float *a,
            const float *packed_b, float *c, const mg_epilogue *epilogue, int num_threads);
/* END CDEF */

#endif

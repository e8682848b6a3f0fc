/* AVX2 + FMA GEMM micro-kernel: 6 rows x 16 columns in 12 ymm accumulators, run for each half
 * of the 32-column panel (one broadcast of A feeds two FMAs); for a narrow tile (nr <= 16)
 * only the first half runs, so the same function is the narrow kernel (16 ymm registers
 * hold no more rows); the tail on the stored tile (gemm_tail.h). Compiled for these extensions
 * and used only when the runtime's ISA is AVX2 (mg_isa_pick in gemm.c). */
#include "gemm_internal.h"

#if MG_X86
#include <immintrin.h>

MG_TARGET_AVX2_BEGIN
#include "gemm_tail.h"

enum { MR = 6 };
#define UNROLL _Pragma("GCC unroll 16")

/* 8 lanes from p, the first n valid (the others read as 0 / not written) */
static inline __m256i lanes8(int n)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

static void gemm_micro_avx2(int64_t kc, const float *const *rows, int64_t ks, const float *bp, float *c,
                            int64_t ldc, int mr, int nr, int load)
{
    gemm_prefetch_tile(c, ldc, mr, nr);
    for (int h = 0; h < 2 && 16 * h < nr; ++h) {
        const int w = nr - 16 * h;
        const __m256i m0 = lanes8(w), m1 = lanes8(w - 8);
        __m256 acc[MR][2];
        UNROLL for (int i = 0; i < MR; ++i)
        {
            const int on = load && i < mr;
            acc[i][0] = on ? _mm256_maskload_ps(c + i * ldc + 16 * h, m0) : _mm256_setzero_ps();
            acc[i][1] = on ? _mm256_maskload_ps(c + i * ldc + 16 * h + 8, m1)
                           : _mm256_setzero_ps();
        }
        const float *b = bp + 16 * h;
        for (int64_t k = 0, o = 0; k < kc; ++k, o += ks, b += MG_GEMM_NR) {
            const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
            UNROLL for (int i = 0; i < MR; ++i)
            {
                const __m256 x = _mm256_broadcast_ss(rows[i] + o);
                acc[i][0] = _mm256_fmadd_ps(x, b0, acc[i][0]);
                acc[i][1] = _mm256_fmadd_ps(x, b1, acc[i][1]);
            }
        }
        UNROLL for (int i = 0; i < MR; ++i) if (i < mr)
        {
            _mm256_maskstore_ps(c + i * ldc + 16 * h, m0, acc[i][0]);
            _mm256_maskstore_ps(c + i * ldc + 16 * h + 8, m1, acc[i][1]);
        }
    }
}

static void gemm_micro_tail_avx2(int64_t kc, const float *const *rows, int64_t ks,
                                 const float *bp, float *c, int64_t ldc, int mr, int nr,
                                 int load, const gemm_tail *tail)
{
    gemm_micro_avx2(kc, rows, ks, bp, c, ldc, mr, nr, load);
    if (tail)
        gemm_tail_tile(tail, c, ldc, mr, nr);
}

const gemm_kernel_table gemm_kernels_avx2 = {MR, gemm_micro_avx2, MR, gemm_micro_avx2, NULL,
                                             gemm_micro_tail_avx2, gemm_micro_tail_avx2,
                                             NULL};

MG_TARGET_END
#endif

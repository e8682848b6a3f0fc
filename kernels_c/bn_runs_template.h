/* The run kernels, written once and instantiated per (ISA, dtype) by bn_isa_*.c.
 *
 * Included with these defined:
 *   BN_ISA, BN_DT     name tokens (avx512/avx2/scalar, f32/f16/bf16)
 *   BN_T              the storage type of tensor elements (float or uint16_t)
 *   VLEN, vf          vector width in floats and the float vector type
 *   vf_zero(), vf_set1(s), vf_add/sub/mul(a, b), vf_fma(a, b, c) = a * b + c
 *   vf_keep(v, n)     v with lanes >= n zeroed (n == VLEN: v)
 *   vf_split(a, b, n) lanes < n from a, the others from b (0 < n < VLEN)
 *   vf_ldk(p)         load VLEN floats of a position array
 *   vf_hsum(v)        the sum of the lanes of v
 *   vf_hsum_batch(v, count, out)  out[k] = vf_hsum(v[k]) for k < count <= BN_HSUM_BATCH
 *                     (plane runs hand it the sums of up to BN_HSUM_BATCH segments at once)
 *   vf_acc(p, v)      position accumulator update: p[0..VLEN) += v
 *   vf_acc_fma(p, u, v)  the same with p[0..VLEN) = fma(u, v, p[0..VLEN))
 *   ld_<dt>(p, n)     load n <= VLEN tensor elements widened to float (missing lanes 0)
 *   st_<dt>(p, v, n)  round and store the first n lanes
 *   st_<dt>_nt(p, v)  round and store VLEN lanes with a non-temporal store (p aligned to
 *                     VLEN elements), vf_fence() orders such stores before later ones
 * No per-dtype or per-ISA logic lives here: only the loops and their formulas.
 *
 * Every kernel body is written once, as a macro of (K, ACC, ACCF): K(i) is coefficient i at
 * the current vector, ACC(i, v) adds v to accumulator i, ACCF(i, u, v) adds u * v to it with
 * one rounding (a fused multiply-add, written out: whether a compiler contracts a product
 * and a sum must not depend on the code path, masked or not, or the sums would depend on
 * the buffers' alignment). BN_RUN turns a body into two functions (bn_internal.h): a row
 * run (K from position arrays; ACC into position arrays or registers) and a plane run (per
 * segment, K broadcast and ACC in registers). Names in scope in a body: x, dy, gx, out0, out1
 * (tensors at the run's start), e (element offset), n (active lanes: VLEN except in masked
 * vectors at the ends of rows, segments and runs). Accumulated values must be zero in
 * inactive lanes: ACC and ACCF apply vf_keep.
 */

#define BN_GLUE3_(a, b, c) a##_##b##_##c
#define BN_GLUE3(a, b, c) BN_GLUE3_(a, b, c)
#define BN_GLUE2_(a, b) a##_##b
#define BN_GLUE2(a, b) BN_GLUE2_(a, b)
#define FN(name) BN_GLUE3(name, BN_ISA, BN_DT)
#define LD(p, n) BN_GLUE2(ld, BN_DT)(p, n)
/* A store: non-temporal for whole vectors in a streaming run (stream_, a constant in each
 * copy of a run that BN_STREAMING makes), rounded alike either way. */
#define BN_ST_CHECKED(p, v, n)                                                      \
    do {                                                                            \
        if (stream_ && (n) == VLEN)                                                 \
            BN_GLUE3(st, BN_DT, nt)(p, v);                                          \
        else                                                                        \
            BN_GLUE2(st, BN_DT)(p, v, n);                                           \
    } while (0)
#ifdef BN_DEFERRED_STORES
/* Stores whose conversion is exact except for some input lanes (AVX512-BF16's
 * vcvtneps2bf16: NaN and subnormal lanes), for an ISA that defines BN_DEFERRED_STORES and
 * st_<dt>_fast(p, v, n), st_<dt>_fast_nt(p, v) (the unchecked conversion),
 * bn_special_mask (a lane mask type) and bn_special(m, v, n) (m with the first n lanes of v
 * that the unchecked conversion would get wrong added). Runs that only write run first
 * with the unchecked stores, collecting the lanes that need the exact conversion in
 * special_; if there were any, the run is run again with the checked stores st_<dt> (same
 * bits as ever). Per vector that is an fpclass and an or, not the checked store's test and
 * branch (a quarter of a bfloat16 inference forward from cache). A run is run twice only
 * where its outputs do not overlap its inputs (an in-place call checks per vector), and
 * runs that also sum never are. */
#define ST(p, v, n)                                                                 \
    do {                                                                            \
        if (defer_) {                                                               \
            special_ = bn_special(special_, v, n);                                  \
            if (stream_ && (n) == VLEN)                                             \
                BN_GLUE3(st, BN_DT, fast_nt)(p, v);                                 \
            else                                                                    \
                BN_GLUE3(st, BN_DT, fast)(p, v, n);                                 \
        } else {                                                                    \
            BN_ST_CHECKED(p, v, n);                                                 \
        }                                                                           \
    } while (0)
#define BN_DEFERRING(a, nacc, RUN)                                                  \
    {                                                                               \
        int checked_ = 1;                                                           \
        if ((nacc) == 0 && !bn_outputs_overlap_inputs(a, sizeof(BN_T))) {           \
            enum { defer_ = 1 };                                                    \
            bn_special_mask special_ = 0;                                           \
            RUN                                                                     \
            checked_ = special_ != 0;                                               \
        }                                                                           \
        if (checked_) {                                                             \
            enum { defer_ = 0 };                                                    \
            bn_special_mask special_ = 0;                                           \
            (void)special_;                                                         \
            RUN                                                                     \
        }                                                                           \
    }
#else
#define ST(p, v, n) BN_ST_CHECKED(p, v, n)
#define BN_DEFERRING(a, nacc, RUN) RUN
#endif

/* RUN compiled twice: with stores kept in cache (a->stream == 0) and with non-temporal
 * stores for whole vectors (1; the driver sets it only where every whole vector a run stores
 * is aligned: see block_stream in batch_norm.c), then a fence. */
#define BN_STREAMING(a, RUN)                                                        \
    if ((a)->stream) {                                                              \
        enum { stream_ = 1 };                                                       \
        RUN                                                                         \
        vf_fence();                                                                 \
    } else {                                                                        \
        enum { stream_ = 0 };                                                       \
        RUN                                                                         \
    }

#define BN_UNROLL_ALL _Pragma("GCC unroll 8")

/* The tensors of a run (or of segment s of a plane run: `off` elements in) */
#define BN_RUN_TENSORS(a, off)                                                      \
    const BN_T *const x = (a)->x ? (const BN_T *)(a)->x + (off) : NULL;             \
    const BN_T *const dy = (a)->dy ? (const BN_T *)(a)->dy + (off) : NULL;          \
    const BN_T *const gx = (a)->gx ? (const BN_T *)(a)->gx + (off) : NULL;          \
    const BN_T *const dy2 = (a)->dy2 ? (const BN_T *)(a)->dy2 + (off) : NULL;       \
    BN_T *const out0 = (a)->out0 ? (BN_T *)(a)->out0 + (off) : NULL;                \
    BN_T *const out1 = (a)->out1 ? (BN_T *)(a)->out1 + (off) : NULL;                \
    (void)x, (void)dy, (void)gx, (void)dy2, (void)out0, (void)out1

/* ---- Row runs ------------------------------------------------------------------------- */
/* Element e of a row run has position (e - head) mod period; j is the position of the current
 * vector. Coefficients are read from the position arrays kp_[i]; accumulators are either the
 * arrays ap_[i] (BN_ROW_ACC) or registers (BN_CHUNK_ACC). */
#define BN_ROW_K(i) vf_ldk(kp_[i] + j)
#define BN_ROW_ACC(i, v) vf_acc(ap_[i] + j, vf_keep(v, n))
#define BN_ROW_ACCF(i, u, v) vf_acc_fma(ap_[i] + j, vf_keep(u, n), vf_keep(v, n))
#define BN_CHUNK_K(i) kv_[i][u_]
#define BN_CHUNK_ACC(i, v) (ra_[i][u_] = vf_add(ra_[i][u_], vf_keep(v, n)))
#define BN_CHUNK_ACCF(i, u, v) (ra_[i][u_] = vf_fma(vf_keep(u, n), vf_keep(v, n), ra_[i][u_]))

/* Memory order (runs that stream a block from memory, a->chunks == 0): rows of `period`
 * positions; a row whose length is not a multiple of VLEN ends with one masked vector.
 * Sums go to the position arrays (an L1-resident load, add and store per vector): the
 * hardware prefetchers see one forward stream per tensor. Unrolled 4 vectors deep: a
 * float16 inference forward from cache ran 1.3-1.5x faster at 256-512 channels (2 threads,
 * interleaved in one process), float32 from memory the same. */
#define BN_FOR_ROW_VECTORS(len, period, ...)                                        \
    for (int64_t row_ = 0; row_ < (len); row_ += (period)) {                        \
        const int64_t rowlen_ = (len) - row_ < (period) ? (len) - row_ : (period);  \
        int64_t j = 0;                                                              \
        _Pragma("GCC unroll 4") for (; j + VLEN <= rowlen_; j += VLEN) {            \
            const int64_t e = row_ + j;                                             \
            const int n = VLEN;                                                     \
            __VA_ARGS__                                                             \
        }                                                                           \
        if (j < rowlen_) {                                                          \
            const int64_t e = row_ + j;                                             \
            const int n = (int)(rowlen_ - j);                                       \
            __VA_ARGS__                                                             \
        }                                                                           \
    }

/* Chunk order (runs that only accumulate over a block already in cache, a->chunks == 1):
 * the period in chunks of CH vectors; a chunk walks rows r_begin..r_end-1 (at most `rowlen`
 * positions each) with its coefficients and sums in registers, then adds the sums to ap_[i]:
 * one store per chunk, not one per row. From memory this order is slow (CH vectors of every
 * row, a strided walk the prefetchers follow badly: 40% of a 256-channel backward). The
 * whole rows add each position's terms one by one in row order to a sum that starts at +0
 * (ap_[i] is zero before the run, and adding the register sum to it is exact); the partial
 * last row's terms are summed from +0 in registers and then added to ap_[i] (`cont` 0: a
 * product accumulated with ACCF rounds twice there, once in memory order).
 * With `cont` 1 a chunk instead starts from ap_[i] and stores its sums back: every term is
 * added to the running sum as memory order adds it, so when a whole period fits one chunk
 * (rows walked in memory order, coefficients and sums in registers: no position-array
 * loads and stores per vector) it replaces the memory order, bit for bit. */
#define BN_ROW_CHUNK(CH, nk, nacc, cont, period, r_begin, r_end, rowlen, ...)       \
    for (int64_t j0_ = 0; j0_ < (rowlen); j0_ += (CH) * VLEN) {                     \
        vf kv_[(nk) + 1][CH], ra_[(nacc) + 1][CH];                                  \
        (void)kv_, (void)ra_;                                                       \
        BN_UNROLL_ALL for (int u_ = 0; u_ < (CH); ++u_) {                           \
            for (int i = 0; i < (nk); ++i)                                          \
                kv_[i][u_] = vf_ldk(kp_[i] + j0_ + u_ * VLEN);                      \
            for (int i = 0; i < (nacc); ++i)                                        \
                ra_[i][u_] = (cont) ? vf_ldk(ap_[i] + j0_ + u_ * VLEN) : vf_zero();  \
        }                                                                           \
        if (j0_ + (CH) * VLEN <= (rowlen)) { /* CH whole vectors */                 \
            for (int64_t r_ = (r_begin); r_ < (r_end); ++r_) {                      \
                BN_UNROLL_ALL for (int u_ = 0; u_ < (CH); ++u_) {                   \
                    const int64_t e = r_ * (period) + j0_ + u_ * VLEN;              \
                    const int n = VLEN;                                             \
                    __VA_ARGS__                                                     \
                }                                                                   \
            }                                                                       \
        } else {                                                                    \
            for (int64_t r_ = (r_begin); r_ < (r_end); ++r_) {                      \
                BN_UNROLL_ALL for (int u_ = 0; u_ < (CH); ++u_) {                   \
                    const int64_t j = j0_ + u_ * VLEN, e = r_ * (period) + j;        \
                    if (j >= (rowlen))                                              \
                        break;                                                      \
                    const int n = (rowlen) - j < VLEN ? (int)((rowlen) - j) : VLEN;  \
                    __VA_ARGS__                                                     \
                }                                                                   \
            }                                                                       \
        }                                                                           \
        BN_UNROLL_ALL for (int u_ = 0; u_ < (CH); ++u_)                             \
            for (int i = 0; i < (nacc); ++i) {                                      \
                if (cont)                                                           \
                    vf_stk(ap_[i] + j0_ + u_ * VLEN, ra_[i][u_]);                   \
                else                                                                \
                    vf_acc(ap_[i] + j0_ + u_ * VLEN, ra_[i][u_]);                   \
            }                                                                       \
    }
#define BN_FOR_ROW_CHUNKS(len, period, CH, nk, nacc, cont, ...)                     \
    do {                                                                            \
        const int64_t rows_ = (len) / (period), tail_ = (len) - rows_ * (period);   \
        BN_ROW_CHUNK(CH, nk, nacc, cont, period, 0, rows_, period, __VA_ARGS__)     \
        BN_ROW_CHUNK(CH, nk, nacc, cont, period, rows_, rows_ + 1, tail_, __VA_ARGS__) \
    } while (0)
/* Vectors per chunk, registers permitting: AVX-512's 32 registers hold a whole 128-float
 * period (8 vectors) of up to 3 coefficient / sum vectors per position */
#define BN_ROW_CHUNK_VECTORS(nk, nacc)                                              \
    (VLEN == 16 && (nk) + (nacc) <= 3 ? 8 : (nk) + (nacc) <= 4 ? 4 : 2)

/* A row run: first the `head` elements before the first aligned one (positions
 * period - head .. period - 1, one masked vector), then rows from position 0; positions
 * (and so the position arrays) count from the head. Chunked runs have no head. Memory
 * order runs whose period fits one chunk walk it as a `cont` chunk (same bits, see above). */
#define BN_ROW_RUN(a, nk, nacc, BODY)                                               \
    const float *kp_[(nk) + 1];                                                     \
    float *ap_[(nacc) + 1];                                                         \
    for (int i = 0; i < (nk); ++i) /* local copies: vector stores may alias *a */   \
        kp_[i] = (a)->k[i];                                                         \
    for (int i = 0; i < (nacc); ++i)                                                \
        ap_[i] = (a)->acc[i];                                                       \
    (void)kp_, (void)ap_;                                                           \
    const int64_t period_ = (a)->period;                                            \
    const int64_t head_ = (a)->head < (a)->len ? (a)->head : (a)->len;              \
    if (head_) {                                                                    \
        BN_RUN_TENSORS(a, 0);                                                       \
        const int64_t e = 0, j = period_ - (a)->head;                               \
        const int n = (int)head_;                                                   \
        BODY(BN_ROW_K, BN_ROW_ACC, BN_ROW_ACCF)                                                  \
    }                                                                               \
    {                                                                               \
        BN_RUN_TENSORS(a, head_);                                                   \
        const int64_t len_ = (a)->len - head_;                                      \
        if ((a)->chunks) {                                                          \
            BN_FOR_ROW_CHUNKS(len_, period_, BN_ROW_CHUNK_VECTORS(nk, nacc), nk, nacc, 0, \
                              BODY(BN_CHUNK_K, BN_CHUNK_ACC, BN_CHUNK_ACCF));                      \
        } else if (period_ <= BN_ROW_CHUNK_VECTORS(nk, nacc) * VLEN) {              \
            BN_FOR_ROW_CHUNKS(len_, period_, BN_ROW_CHUNK_VECTORS(nk, nacc), nk, nacc, 1, \
                              BODY(BN_CHUNK_K, BN_CHUNK_ACC, BN_CHUNK_ACCF));                      \
        } else {                                                                    \
            BN_FOR_ROW_VECTORS(len_, period_, BODY(BN_ROW_K, BN_ROW_ACC, BN_ROW_ACCF))           \
        }                                                                           \
    }

/* ---- Plane runs ----------------------------------------------------------------------- */
/* Per segment, coefficients and sums live in registers: kv_[i][u_] (broadcast to every
 * slot) and ra_[i][u_], u_ a vector slot that the unrolled loops make a constant. */
#define BN_UNROLL 4
#define BN_PLANE_K(i) kv_[i][u_]
#define BN_PLANE_ACC(i, v) (ra_[i][u_] = vf_add(ra_[i][u_], vf_keep(v, n)))
#define BN_PLANE_ACCF(i, u, v) (ra_[i][u_] = vf_fma(vf_keep(u, n), vf_keep(v, n), ra_[i][u_]))
#define BN_PLANE_RUN(a, nk, nacc, BODY)                                             \
    vf pend_[(nacc) + 1][BN_HSUM_BATCH]; /* segment sums awaiting vf_hsum_batch */  \
    (void)pend_;                                                                    \
    for (int64_t s = 0; s < (a)->nseg; ++s) {                                       \
        vf kv_[(nk) + 1][BN_UNROLL], ra_[(nacc) + 1][BN_UNROLL];                    \
        (void)kv_, (void)ra_;                                                       \
        BN_UNROLL_ALL for (int u_ = 0; u_ < BN_UNROLL; ++u_) {                      \
            for (int i = 0; i < (nk); ++i)                                          \
                kv_[i][u_] = vf_set1((a)->k[i][s]);                                 \
            for (int i = 0; i < (nacc); ++i)                                        \
                ra_[i][u_] = vf_zero();                                             \
        }                                                                           \
        int64_t h_ = 0; /* runs that only write: a masked head up to the first aligned \
                           output element (streaming: the driver checked out1 shares it) */ \
        if ((nacc) == 0) {                                                          \
            BN_RUN_TENSORS(a, s * (a)->seg_stride);                                 \
            h_ = bn_align_head(out0, VLEN * sizeof(BN_T), sizeof(BN_T), (a)->len);  \
            if (h_) {                                                               \
                const int u_ = 0;                                                   \
                const int64_t e = 0;                                                \
                const int n = (int)h_;                                              \
                BODY(BN_PLANE_K, BN_PLANE_ACC, BN_PLANE_ACCF)                                      \
            }                                                                       \
        }                                                                           \
        BN_RUN_TENSORS(a, s * (a)->seg_stride + h_);                                \
        const int64_t len_ = (a)->len - h_;                                         \
        int64_t e0_ = 0;                                                            \
        for (; e0_ + BN_UNROLL * VLEN <= len_; e0_ += BN_UNROLL * VLEN) {           \
            BN_UNROLL_ALL for (int u_ = 0; u_ < BN_UNROLL; ++u_) {                  \
                const int64_t e = e0_ + u_ * VLEN;                                  \
                const int n = VLEN;                                                 \
                BODY(BN_PLANE_K, BN_PLANE_ACC, BN_PLANE_ACCF)                                      \
            }                                                                       \
        }                                                                           \
        BN_UNROLL_ALL for (int u_ = 0; u_ < BN_UNROLL; ++u_) { /* the last < 4 vectors */ \
            const int64_t e = e0_ + u_ * VLEN;                                      \
            if (e >= len_)                                                          \
                break;                                                              \
            const int n = len_ - e < VLEN ? (int)(len_ - e) : VLEN;                 \
            BODY(BN_PLANE_K, BN_PLANE_ACC, BN_PLANE_ACCF)                                          \
        }                                                                           \
        for (int i = 0; i < (nacc); ++i) {                                          \
            vf sum = ra_[i][0];                                                     \
            BN_UNROLL_ALL for (int u = 1; u < BN_UNROLL; ++u)                       \
                sum = vf_add(sum, ra_[i][u]);                                       \
            pend_[i][s % BN_HSUM_BATCH] = sum;                                      \
        }                                                                           \
        if ((nacc) && (s % BN_HSUM_BATCH == BN_HSUM_BATCH - 1 || s == (a)->nseg - 1)) { \
            const int64_t first_ = s - s % BN_HSUM_BATCH;                           \
            for (int i = 0; i < (nacc); ++i)                                        \
                vf_hsum_batch(pend_[i], (int)(s - first_ + 1), (a)->acc[i] + first_); \
        }                                                                           \
    }

/* Plane runs that only write, over adjacent whole planes (seg_stride == len >= VLEN, so a
 * vector holds at most one plane boundary): one walk over the nseg * len contiguous elements
 * from a masked head up to the first aligned output element, the vector that holds a
 * boundary taking the coefficients of its first lanes from one plane and of the others from
 * the next (vf_split). Each element gets the same operations as in BN_PLANE_RUN, so the same
 * bits, without a masked head and tail per plane: 7x7 planes spent most of their time on
 * those (256x512x7x7 inference, 2 threads: float16 0.60 ms against PyTorch's 0.48 ms). */
#define BN_WALK_CUR_K(i) cur_[i]
#define BN_WALK_MIX_K(i) mix_[i]
#define BN_WALK_NO_ACC(i, v) ((void)(v)) /* runs that sum never walk */
#define BN_WALK_NO_ACCF(i, u, v) ((void)(u), (void)(v))
#define BN_PLANE_WALK(a, nk, BODY)                                                  \
    {                                                                               \
        BN_RUN_TENSORS(a, 0);                                                       \
        const int64_t len_ = (a)->len, total_ = (a)->nseg * len_;                   \
        vf cur_[(nk) + 1], next_[(nk) + 1], mix_[(nk) + 1];                         \
        (void)cur_, (void)next_, (void)mix_;                                        \
        for (int i = 0; i < (nk); ++i) {                                            \
            cur_[i] = vf_set1((a)->k[i][0]);                                        \
            next_[i] = vf_set1((a)->k[i][1]);                                       \
        }                                                                           \
        int64_t s_ = 0, end_ = len_; /* the current plane, where it ends */         \
        int64_t e = bn_align_head(out0, VLEN * sizeof(BN_T), sizeof(BN_T), VLEN - 1); \
        if (e) { /* the head: e < VLEN <= len_, inside plane 0 */                   \
            const int64_t e0_ = e;                                                  \
            {                                                                       \
                const int64_t e = 0;                                                \
                const int n = (int)e0_;                                             \
                BODY(BN_WALK_CUR_K, BN_WALK_NO_ACC, BN_WALK_NO_ACCF)                \
            }                                                                       \
        }                                                                           \
        for (;;) {                                                                  \
            _Pragma("GCC unroll 4") for (; e + VLEN <= end_; e += VLEN) {           \
                const int n = VLEN;                                                 \
                BODY(BN_WALK_CUR_K, BN_WALK_NO_ACC, BN_WALK_NO_ACCF)                \
            }                                                                       \
            if (end_ == total_) { /* the last plane's masked tail */                \
                if (e < total_) {                                                   \
                    const int n = (int)(total_ - e);                                \
                    BODY(BN_WALK_CUR_K, BN_WALK_NO_ACC, BN_WALK_NO_ACCF)            \
                }                                                                   \
                break;                                                              \
            }                                                                       \
            if (e < end_) { /* a whole vector across the boundary (the next plane   \
                               holds >= VLEN elements) */                           \
                for (int i = 0; i < (nk); ++i)                                      \
                    mix_[i] = vf_split(cur_[i], next_[i], (int)(end_ - e));         \
                const int n = VLEN;                                                 \
                BODY(BN_WALK_MIX_K, BN_WALK_NO_ACC, BN_WALK_NO_ACCF)                \
                e += VLEN;                                                          \
            }                                                                       \
            ++s_;                                                                   \
            end_ += len_;                                                           \
            for (int i = 0; i < (nk); ++i) {                                        \
                cur_[i] = next_[i];                                                 \
                if (s_ + 1 < (a)->nseg)                                             \
                    next_[i] = vf_set1((a)->k[i][s_ + 1]);                          \
            }                                                                       \
        }                                                                           \
    }

/* Plane runs that sum over adjacent whole planes shorter than 16 vectors
 * (bn_plane_sums_walk: seg_stride == len, VLEN <= len < 16 * VLEN; plain stores): one walk over
 * the nseg * len contiguous elements on the vector grid of the run's start, as
 * BN_PLANE_WALK, with each plane's sums in one register per accumulator. The vector that
 * holds a boundary (its first m_ lanes in plane s_) is evaluated once with mixed
 * coefficients; its first lanes are added to plane s_'s sums, which then go to pend_, and
 * its other lanes start plane s_ + 1's (BN_SWALK_B_ACC: 0 + v, as a sum from +0 would).
 * The grid, and so which lane each element is summed in, depends only on the shape, never
 * on alignment. A 49-element plane takes 3 or 4 vectors where the plane run takes 4 (one
 * masked), without the per-segment set-up. In-process A/B, 2 threads, training forward and
 * inference backward: 7x7 planes 1.2-1.3x (float32 1.03-1.34x), 8x8-15x15 1.05-1.2x; from
 * 16x16 on even (one sum chain per plane against the plane run's four), 56x56 0.9x. */
#define BN_SWALK_ACC(i, v) (ra_[i] = vf_add(ra_[i], vf_keep(v, n)))
#define BN_SWALK_ACCF(i, u, v) (ra_[i] = vf_fma(vf_keep(u, n), vf_keep(v, n), ra_[i]))
#define BN_SWALK_B_ACC(i, v)                                                        \
    (ra_[i] = vf_split(vf_add(ra_[i], (v)), ra_[i], m_),                            \
     nx_[i] = vf_split(vf_zero(), vf_add(vf_zero(), (v)), m_))
#define BN_SWALK_B_ACCF(i, u, v)                                                    \
    (ra_[i] = vf_split(vf_fma((u), (v), ra_[i]), ra_[i], m_),                       \
     nx_[i] = vf_split(vf_zero(), vf_fma((u), (v), vf_zero()), m_))
#define BN_PLANE_SUM_WALK(a, nk, nacc, BODY)                                        \
    {                                                                               \
        BN_RUN_TENSORS(a, 0);                                                       \
        vf pend_[(nacc) + 1][BN_HSUM_BATCH];                                        \
        vf ra_[(nacc) + 1], nx_[(nacc) + 1], cur_[(nk) + 1], next_[(nk) + 1], mix_[(nk) + 1]; \
        (void)cur_, (void)next_, (void)mix_, (void)nx_;                             \
        const int64_t len_ = (a)->len, nseg_ = (a)->nseg;                           \
        for (int i = 0; i <= (nk); ++i) /* (slot nk unused: quiets -Wmaybe-uninitialized) */ \
            cur_[i] = next_[i] = i < (nk) ? vf_set1((a)->k[i][0]) : vf_zero();      \
        for (int i = 0; i < (nacc); ++i)                                            \
            ra_[i] = vf_zero();                                                     \
        int64_t e = 0;                                                              \
        for (int64_t s_ = 0; s_ < nseg_; ++s_) {                                    \
            const int64_t end_ = (s_ + 1) * len_;                                   \
            for (; e + VLEN <= end_; e += VLEN) {                                   \
                const int n = VLEN;                                                 \
                BODY(BN_WALK_CUR_K, BN_SWALK_ACC, BN_SWALK_ACCF)                    \
            }                                                                       \
            const int m_ = (int)(end_ - e); /* lanes of plane s_ in the vector at e */ \
            const int last_ = s_ + 1 == nseg_;                                      \
            if (m_ && last_) { /* the run's masked tail */                          \
                const int n = m_;                                                   \
                BODY(BN_WALK_CUR_K, BN_SWALK_ACC, BN_SWALK_ACCF)                    \
            }                                                                       \
            if (!last_)                                                             \
                for (int i = 0; i < (nk); ++i)                                      \
                    next_[i] = vf_set1((a)->k[i][s_ + 1]);                          \
            if (m_ && !last_) { /* a whole vector across the boundary */            \
                for (int i = 0; i < (nk); ++i)                                      \
                    mix_[i] = vf_split(cur_[i], next_[i], m_);                      \
                const int n = VLEN;                                                 \
                BODY(BN_WALK_MIX_K, BN_SWALK_B_ACC, BN_SWALK_B_ACCF)                \
                e += VLEN;                                                          \
            }                                                                       \
            for (int i = 0; i < (nacc); ++i) {                                      \
                pend_[i][s_ % BN_HSUM_BATCH] = ra_[i];                              \
                ra_[i] = m_ && !last_ ? nx_[i] : vf_zero();                         \
            }                                                                       \
            if (s_ % BN_HSUM_BATCH == BN_HSUM_BATCH - 1 || last_) {                 \
                const int64_t first_ = s_ - s_ % BN_HSUM_BATCH;                     \
                for (int i = 0; i < (nacc); ++i)                                    \
                    vf_hsum_batch(pend_[i], (int)(s_ - first_ + 1), (a)->acc[i] + first_); \
            }                                                                       \
            if (!last_)                                                             \
                for (int i = 0; i < (nk); ++i)                                      \
                    cur_[i] = next_[i];                                             \
        }                                                                           \
    }

/* Defines FN(row_<name>) and FN(plane_<name>) from BODY(K, ACC, ACCF), which uses nk
 * coefficients and nacc accumulators. */
#define BN_RUN(name, nk, nacc, BODY)                                                \
    static void FN(row_##name)(const bn_run_args *a)                                \
    {                                                                               \
        BN_DEFERRING(a, nacc, BN_STREAMING(a, BN_ROW_RUN(a, nk, nacc, BODY)))       \
    }                                                                               \
    static void FN(plane_##name)(const bn_run_args *a)                              \
    {                                                                               \
        if ((nacc) == 0 && VLEN > 1 && a->nseg > 1 && a->seg_stride == a->len &&    \
            a->len >= VLEN) {                                                       \
            BN_DEFERRING(a, nacc, BN_STREAMING(a, BN_PLANE_WALK(a, nk, BODY)))      \
        } else if (bn_plane_sums_walk(a, VLEN, nacc)) {                            \
            BN_DEFERRING(a, nacc, {                                                 \
                enum { stream_ = 0 };                                               \
                BN_PLANE_SUM_WALK(a, nk, nacc, BODY)                                \
            })                                                                      \
        } else {                                                                    \
            BN_DEFERRING(a, nacc, BN_STREAMING(a, BN_PLANE_RUN(a, nk, nacc, BODY))) \
        }                                                                           \
    }

/* acc0 += x  (first sub-pass of the block statistics) */
#define BODY_SUM_X(K, ACC, ACCF) { ACC(0, LD(x + e, n)); }
BN_RUN(sum_x, 0, 1, BODY_SUM_X)

/* xc = x - k0 (block mean); acc0 += xc; acc1 += xc^2  (second sub-pass, from cache) */
#define BODY_DEV_X(K, ACC, ACCF)                                                          \
    {                                                                               \
        const vf xc = vf_keep(vf_sub(LD(x + e, n), K(0)), n);                       \
        ACC(0, xc);                                                                 \
        ACCF(1, xc, xc);                                                     \
    }
BN_RUN(dev_x, 1, 2, BODY_DEV_X)

/* y = (x - k0) * k1 + k2  with k0 = mean, k1 = scale * rsqrt(variance + eps), k2 = offset */
#define BODY_FWD_APPLY(K, ACC, ACCF)                                                      \
    { ST(out0 + e, vf_fma(vf_sub(LD(x + e, n), K(0)), K(1), K(2)), n); }
BN_RUN(fwd_apply, 3, 0, BODY_FWD_APPLY)

/* xc = x - k0 (given mean); acc0 += dy; acc1 += dy * xc */
#define BODY_BWD_SUMS(K, ACC, ACCF)                                                       \
    {                                                                               \
        const vf g = LD(dy + e, n);                                                 \
        ACC(0, g);                                                                  \
        ACCF(1, g, vf_sub(LD(x + e, n), K(0)));                  \
    }
BN_RUN(bwd_sums, 1, 2, BODY_BWD_SUMS)

/* dx = k1 * (dy - k3) + k2 * (x - k0): the training x_backprop
 * scale*r*(dy - mean(dy) - xc*mean(dy*xc)*r^2) with per-channel k0 = mean, k1 = scale*r,
 * k2 = -scale*r^3*sum(dy*xc)/n, k3 = mean(dy) (dy - mean(dy) first, as TF: exactly 0 for n = 1) */
#define BODY_BWD_APPLY(K, ACC, ACCF)                                                      \
    {                                                                               \
        const vf t = vf_mul(K(2), vf_sub(LD(x + e, n), K(0)));                      \
        ST(out0 + e, vf_fma(K(1), vf_sub(LD(dy + e, n), K(3)), t), n);              \
    }
BN_RUN(bwd_apply, 4, 0, BODY_BWD_APPLY)

/* The training fusions (_FusedBatchNormEx, _FusedBatchNormGradEx), float32 bit for bit the
 * unfused ops' kernels: the batch-norm value of BODY_FWD_APPLY, + side input (read through
 * dy; AddV2's single rounding), then Relu (mg_relu: v > 0 or NaN ? v : +0). */
#define BN_FWD_VALUE(K) vf_fma(vf_sub(LD(x + e, n), K(0)), K(1), K(2))
#define BODY_FWD_APPLY_RELU(K, ACC, ACCF) { ST(out0 + e, vf_relu(BN_FWD_VALUE(K)), n); }
BN_RUN(fwd_apply_relu, 3, 0, BODY_FWD_APPLY_RELU)
#define BODY_FWD_APPLY_SIDE(K, ACC, ACCF) { ST(out0 + e, vf_add(BN_FWD_VALUE(K), LD(dy + e, n)), n); }
BN_RUN(fwd_apply_side, 3, 0, BODY_FWD_APPLY_SIDE)
#define BODY_FWD_APPLY_SIDE_RELU(K, ACC, ACCF)                                            \
    { ST(out0 + e, vf_relu(vf_add(BN_FWD_VALUE(K), LD(dy + e, n))), n); }
BN_RUN(fwd_apply_side_relu, 3, 0, BODY_FWD_APPLY_SIDE_RELU)

/* The backward runs with dy masked by the forward's Relu output y (read through gx):
 * g = y > 0 ? dy : dy * 0 (mg_relu_grad), then BODY_BWD_SUMS / BODY_BWD_APPLY of g. The sums
 * run stores g to out1 when given (the side input's gradient, exact in every dtype: dy or a
 * zero), and the driver then runs BODY_BWD_APPLY on it: one tensor less to read than
 * BODY_BWD_APPLY_RELU, which masks dy again. */
#define BN_MASKED_DY vf_relu_grad(LD(dy + e, n), LD(gx + e, n))
#define BODY_BWD_SUMS_RELU(K, ACC, ACCF)                                                  \
    {                                                                               \
        const vf g = BN_MASKED_DY;                                                  \
        ACC(0, g);                                                                  \
        ACCF(1, g, vf_sub(LD(x + e, n), K(0)));                  \
        if (out1)                                                                   \
            ST(out1 + e, g, n);                                                     \
    }
BN_RUN(bwd_sums_relu, 1, 2, BODY_BWD_SUMS_RELU)
#define BODY_BWD_APPLY_RELU(K, ACC, ACCF)                                                 \
    {                                                                               \
        const vf g = BN_MASKED_DY;                                                  \
        const vf t = vf_mul(K(2), vf_sub(LD(x + e, n), K(0)));                      \
        ST(out0 + e, vf_fma(K(1), vf_sub(g, K(3)), t), n);                          \
    }
BN_RUN(bwd_apply_relu, 4, 0, BODY_BWD_APPLY_RELU)
/* _FusedBatchNormGradEx with an addend (AddN(dy, dy2) -> ReluGrad -> the backward): the
 * masked sum g = relu_grad(dy + dy2, y), AddN's float32 sum (its input order) rounded once
 * (float32 only: the driver takes no other dtype), summed as BODY_BWD_SUMS_RELU and stored
 * to out1 for the apply pass (BODY_BWD_APPLY of g). */
#define BODY_BWD_SUMS_RELU_ADD(K, ACC, ACCF)                                              \
    {                                                                               \
        const vf g = vf_relu_grad(vf_add(LD(dy + e, n), LD(dy2 + e, n)), LD(gx + e, n)); \
        ACC(0, g);                                                                  \
        ACCF(1, g, vf_sub(LD(x + e, n), K(0)));                  \
        ST(out1 + e, g, n);                                                         \
    }
BN_RUN(bwd_sums_relu_add, 1, 2, BODY_BWD_SUMS_RELU_ADD)

/* Inference backward in one pass: dx = dy * k1 (k1 = scale * r); acc0 += dy;
 * acc1 += dy * (x - k0) */
#define BODY_BWD_INFER(K, ACC, ACCF)                                                      \
    {                                                                               \
        const vf g = LD(dy + e, n);                                                 \
        ST(out0 + e, vf_mul(g, K(1)), n);                                           \
        ACC(0, g);                                                                  \
        ACCF(1, g, vf_sub(LD(x + e, n), K(0)));                  \
    }
BN_RUN(bwd_infer, 2, 2, BODY_BWD_INFER)

/* acc0 += x; acc1 += dy; acc2 += gx  (first sub-pass of the grad-grad statistics) */
#define BODY_GG_SUM(K, ACC, ACCF)                                                         \
    {                                                                               \
        ACC(0, LD(x + e, n));                                                       \
        ACC(1, LD(dy + e, n));                                                      \
        ACC(2, LD(gx + e, n));                                                      \
    }
BN_RUN(gg_sum, 0, 3, BODY_GG_SUM)

/* Centered at the block means k0, k1, k2: xc = x - k0, dc = dy - k1, gc = gx - k2;
 * acc0..2 += xc, dc, gc; acc3 += xc^2; acc4 += dc*xc; acc5 += gc*xc; acc6 += gc*dc */
#define BODY_GG_DEV(K, ACC, ACCF)                                                         \
    {                                                                               \
        const vf xc = vf_keep(vf_sub(LD(x + e, n), K(0)), n);                       \
        const vf dc = vf_keep(vf_sub(LD(dy + e, n), K(1)), n);                      \
        const vf gc = vf_keep(vf_sub(LD(gx + e, n), K(2)), n);                      \
        ACC(0, xc);                                                                 \
        ACC(1, dc);                                                                 \
        ACC(2, gc);                                                                 \
        ACCF(3, xc, xc);                                                     \
        ACCF(4, dc, xc);                                                     \
        ACCF(5, gc, xc);                                                     \
        ACCF(6, gc, dc);                                                     \
    }
BN_RUN(gg_dev, 3, 7, BODY_GG_DEV)

/* Grad-grad training outputs, centered at the batch means k0 (x), k1 (dy), k2 (gx):
 * d_dy = k3*gc + (k4*xc + k5);  d_x = k6*xc + (k7*dc + k8*gc)  (coefficients: batch_norm.c) */
#define BODY_GG_APPLY(K, ACC, ACCF)                                                       \
    {                                                                               \
        const vf xc = vf_sub(LD(x + e, n), K(0));                                   \
        const vf dc = vf_sub(LD(dy + e, n), K(1));                                  \
        const vf gc = vf_sub(LD(gx + e, n), K(2));                                  \
        ST(out0 + e, vf_fma(K(3), gc, vf_fma(K(4), xc, K(5))), n);                  \
        ST(out1 + e, vf_fma(K(6), xc, vf_fma(K(7), dc, vf_mul(K(8), gc))), n);      \
    }
BN_RUN(gg_apply, 9, 0, BODY_GG_APPLY)

/* Grad-grad inference in one pass: k0 = mean, k1 = scale*r, k2 = gscale, k3 = goffset, k4 = r;
 * d_dy = (gx*k1 + (k2*(x - k0))*k4) + k3; d_x = (k2*dy)*k4; acc0 += gx*dy. The outputs in
 * the reference's order, each operation rounded (an overflow of gscale*(x - mean) or gscale*dy
 * is the reference's): compiled without contracting products and sums into FMAs. */
#define BN_GG_INFER_D_DY(K, g)                                                      \
    vf_add(vf_add(vf_mul(g, K(1)), vf_mul(vf_mul(K(2), vf_sub(LD(x + e, n), K(0))), K(4))), \
           K(3))
#define BODY_GG_INFER(K, ACC, ACCF)                                                       \
    {                                                                               \
        const vf g = LD(gx + e, n), d = LD(dy + e, n);                              \
        ST(out0 + e, BN_GG_INFER_D_DY(K, g), n);                                    \
        ST(out1 + e, vf_mul(vf_mul(K(2), d), K(4)), n);                             \
        ACCF(0, g, d);                                                       \
    }
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off") /* gg_infer, to the pop below */
BN_RUN(gg_infer, 5, 1, BODY_GG_INFER)

#pragma GCC pop_options

#define BN_BOTH(id, name) .row[id] = FN(row_##name), .plane[id] = FN(plane_##name)
const bn_run_table BN_GLUE3(bn_runs, BN_ISA, BN_DT) = {
    .vlen = VLEN,
    BN_BOTH(BN_SUM_X, sum_x),
    BN_BOTH(BN_DEV_X, dev_x),
    BN_BOTH(BN_FWD_APPLY, fwd_apply),
    BN_BOTH(BN_BWD_SUMS, bwd_sums),
    BN_BOTH(BN_BWD_APPLY, bwd_apply),
    BN_BOTH(BN_BWD_INFER, bwd_infer),
    BN_BOTH(BN_GG_SUM, gg_sum),
    BN_BOTH(BN_GG_DEV, gg_dev),
    BN_BOTH(BN_GG_APPLY, gg_apply),
    BN_BOTH(BN_GG_INFER, gg_infer),
    BN_BOTH(BN_FWD_APPLY_RELU, fwd_apply_relu),
    BN_BOTH(BN_FWD_APPLY_SIDE, fwd_apply_side),
    BN_BOTH(BN_FWD_APPLY_SIDE_RELU, fwd_apply_side_relu),
    BN_BOTH(BN_BWD_SUMS_RELU, bwd_sums_relu),
    BN_BOTH(BN_BWD_APPLY_RELU, bwd_apply_relu),
    BN_BOTH(BN_BWD_SUMS_RELU_ADD, bwd_sums_relu_add),
};

/* minigraph native GEMM: the driver (B packing, blocking, threads); see gemm.h.
 *
 * A call is one job of the worker pool (mg_pool_run): items of (M block of at most GEMM_MC
 * rows, equal blocks: gemm_block_rows,
 * N block of whole panels). An item walks K in blocks of GEMM_KC and, per block, runs the
 * micro-kernel (the narrow one for a panel of <= 16 columns: gemm_internal.h) over every
 * (panel, row group) of its tile: the panel's kc x 32 floats stay in
 * L1 while the block's rows of A (<= 96 KiB) sit in L2. A is read where it lies (no packing:
 * packing it cost as much as the product when N is small, as in a 1x1 convolution with 64
 * output channels): a row group is mr row pointers, walked with step 1 (row-major A) or m
 * (transposed A, whose k-th row holds the group's values side by side); rows a multiple of
 * 4 KiB apart are copied per K block into the thread's scratch first (gemm_rows_crowd_l1:
 * side by side they would evict each other from the L1). An element is
 * written by one item only and its chain of FMAs runs k = 0 .. K - 1 in order, whatever the
 * blocks and threads (gemm.h). The epilogue is applied by the micro-kernel of the last K
 * block to each finished tile before it is stored (gemm_tail, bit for bit
 * mg_channel_epilogue). */
#include <stdlib.h>
#include <string.h>

#include "gemm.h"
#include "gemm_internal.h"

enum { GEMM_MC = 96, GEMM_KC = 256, GEMM_NC_PANELS = 8 };
_Static_assert(GEMM_KC + 16 <= GEMM_COPY_LD, "a K block's copied row fits its stride");

const gemm_kernel_table *gemm_kernels(void)
{
    static const void *const tables[MG_NISA] =
        MG_ISA_TABLES(&gemm_kernels_scalar, &gemm_kernels_avx2, &gemm_kernels_avx512);
    return mg_isa_pick(tables);
}

static int64_t panels_of(int64_t n) { return (n + MG_GEMM_NR - 1) / MG_GEMM_NR; }

int64_t mg_gemm_packed_floats(int64_t k, int64_t n)
{
    if (k < 0 || n < 0)
        return -1;
    const int64_t width = panels_of(n) * MG_GEMM_NR;
    if (width && k > (INT64_MAX / 4) / width) /* the byte count must fit too */
        return -1;
    return k * width;
}

typedef struct {
    int64_t k, n;
    int trans_b;
    const float *b;
    float *packed;
} pack_call;

static void pack_panels(void *ctx, int64_t lo, int64_t hi)
{
    const pack_call *p = ctx;
    const int64_t k = p->k, n = p->n;
    for (int64_t panel = lo; panel < hi; ++panel) {
        float *dst = p->packed + panel * k * MG_GEMM_NR;
        const int64_t j0 = panel * MG_GEMM_NR;
        const int64_t w = n - j0 < MG_GEMM_NR ? n - j0 : MG_GEMM_NR;
        if (w < MG_GEMM_NR)
            memset(dst, 0, (size_t)(k * MG_GEMM_NR) * sizeof(float));
        if (p->trans_b) { /* B^T stored [n][k]: column j of B is row j of it */
            for (int64_t j = 0; j < w; ++j) {
                const float *src = p->b + (j0 + j) * k;
                for (int64_t r = 0; r < k; ++r)
                    dst[r * MG_GEMM_NR + j] = src[r];
            }
        } else {
            for (int64_t r = 0; r < k; ++r)
                memcpy(dst + r * MG_GEMM_NR, p->b + r * n + j0, (size_t)w * sizeof(float));
        }
    }
}

int mg_gemm_pack_b(int64_t k, int64_t n, int trans_b, const float *b, float *packed,
                   int num_threads)
{
    const int64_t floats = mg_gemm_packed_floats(k, n);
    if (floats < 0 || (floats && !packed) || (k && n && !b))
        return MG_EINVAL;
    pack_call p = {k, n, trans_b, b, packed};
    mg_pool_rows(mg_stream_threads(num_threads, floats), panels_of(n), 1, pack_panels, &p);
    return MG_OK;
}

typedef struct {
    const gemm_kernel_table *t;
    int64_t m, n, k;
    int trans_a;
    const float *a, *bp;
    float *c;
    int64_t mc, nblocks, nc_panels;
    const mg_epilogue *ep;
    float *scratch; /* NULL, or GEMM_MC rows of GEMM_COPY_LD floats per thread: A's rows
                     * copied per K block where they crowd the L1 (gemm_rows_crowd_l1) */
} gemm_call;

static void gemm_item(void *ctx, int64_t item, int tid)
{
    const gemm_call *g = ctx;
    float *copy = g->scratch ? g->scratch + (int64_t)tid * GEMM_MC * GEMM_COPY_LD : NULL;
    const int64_t m0 = item / g->nblocks * g->mc, p0 = item % g->nblocks * g->nc_panels;
    const int64_t rows = g->m - m0 < g->mc ? g->m - m0 : g->mc;
    const int64_t np = panels_of(g->n), p1 = p0 + g->nc_panels < np ? p0 + g->nc_panels : np;
    for (int64_t k0 = 0; k0 < g->k; k0 += GEMM_KC) {
        const int64_t kc = g->k - k0 < GEMM_KC ? g->k - k0 : GEMM_KC;
        const int last = k0 + kc == g->k; /* the epilogue goes with the last block's sums */
        if (copy)
            for (int64_t r = 0; r < rows; ++r)
                memcpy(copy + r * GEMM_COPY_LD, g->a + (m0 + r) * g->k + k0,
                       (size_t)kc * sizeof(float));
        for (int64_t p = p0; p < p1; ++p) {
            const int64_t j0 = p * MG_GEMM_NR;
            const int nr = g->n - j0 < MG_GEMM_NR ? (int)(g->n - j0) : MG_GEMM_NR;
            const float *bp = g->bp + p * g->k * MG_GEMM_NR + k0 * MG_GEMM_NR;
            int mr;
            const gemm_micro_tail_fn micro = gemm_micro_tail_for(g->t, nr, &mr);
            for (int64_t g0 = 0; g0 < rows; g0 += mr) {
                const int valid = rows - g0 < mr ? (int)(rows - g0) : mr;
                const float *a_rows[GEMM_MR_MAX];
                for (int i = 0; i < mr; ++i) {
                    const int64_t row = g0 + (i < valid ? i : valid - 1);
                    a_rows[i] = copy       ? copy + row * GEMM_COPY_LD
                                : g->trans_a ? g->a + k0 * g->m + m0 + row
                                             : g->a + (m0 + row) * g->k + k0;
                }
                const int64_t at = (m0 + g0) * g->n + j0;
                gemm_tail tail;
                micro(kc, a_rows, g->trans_a ? g->m : 1, bp, g->c + at, g->n, valid, nr, k0 > 0,
                      last ? gemm_tail_at(g->ep, j0, at, g->n, &tail) : NULL);
            }
        }
    }
}

int mg_gemm(int64_t m, int64_t n, int64_t k, int trans_a, const float *a,
            const float *packed_b, float *c, const mg_epilogue *epilogue, int num_threads)
{
    if (m < 0 || mg_gemm_packed_floats(k, n) < 0 || (m && n && !c) || (m && k && !a) ||
        (k && n && !packed_b) || (epilogue && mg_epilogue_check(epilogue) != MG_OK))
        return MG_EINVAL;
    if (!m || !n)
        return MG_OK;
    if (!k) {
        memset(c, 0, (size_t)(m * n) * sizeof(float));
    } else {
        const int nt = mg_work_threads(num_threads, (double)m * (double)n * (double)k);
        const int64_t np = panels_of(n);
        /* M blocks of at most GEMM_MC rows, smaller while the panels alone would leave a
         * thread without an item (one panel: a dense layer's few outputs) */
        int64_t most = GEMM_MC;
        while (most > 16 && (m + most - 1) / most * np < nt)
            most -= 16;
        const int64_t mc = gemm_block_rows(m, most), mblocks = (m + mc - 1) / mc;
        /* N blocks of up to GEMM_NC_PANELS panels, fewer while the items would not give
         * every thread about 4 (the split changes no result: gemm.h) */
        int64_t ncp = np < GEMM_NC_PANELS ? np : GEMM_NC_PANELS;
        while (ncp > 1 && mblocks * ((np + ncp - 1) / ncp) < 4 * (int64_t)nt)
            --ncp;
        gemm_call g = {gemm_kernels(), m, n, k, trans_a, a, packed_b, c, mc,
                       (np + ncp - 1) / ncp, ncp, epilogue, NULL};
        /* rows that crowd the L1 are copied */
        if (!trans_a && gemm_rows_crowd_l1(k * (int64_t)sizeof(float)) &&
            !(g.scratch = mg_alloc_floats((int64_t)nt * GEMM_MC * GEMM_COPY_LD)))
            return MG_ENOMEM;
        mg_pool_run(nt, mblocks * g.nblocks, gemm_item, &g);
        free(g.scratch);
        return MG_OK;
    }
    return epilogue ? mg_channel_epilogue(m, n, c, epilogue, num_threads) : MG_OK;
}

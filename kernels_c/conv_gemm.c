/* minigraph native convolution forward as an implicit GEMM: the driver; see conv_gemm.h.
 *
 * An item (group g, block of CG_MC output pixels, block of panels) first notes each pixel's
 * image offset and the input row / column of its top-left tap, then walks the K blocks in
 * order (segments: one tap, or one tap row when merged; each cut into chunks of at most
 * CG_KC floats). Per K block it points every pixel's row at its chunk (in x, at zeros, or at
 * a copy in the thread's scratch) once, and runs the micro-kernel over every (panel, group
 * of mr pixels): the block's rows stay in L2 while a panel's chunk of B sits in L1. After
 * the last block the item's tile gets the epilogue. An output element is written by one
 * item only, its chain in the order conv_gemm.h gives. */
#include "conv_gemm.h"

#include <stdlib.h>
#include <string.h>

#include "gemm_internal.h"

enum { CG_MC = 96, CG_KC = 256, CG_NC_PANELS = 8 };

static const float cg_zeros[CG_KC]; /* the row of a tap in the padding */

typedef struct {
    const gemm_kernel_table *t;
    int64_t h, w, c, kw, co, cg, cog, sh, sw, dh, dw, pt, pl, oh, ow;
    int64_t m, k;        /* pixels; K = kh * kw * cg */
    int64_t nseg, seglen; /* segments of K (tap rows when merged, else taps), floats each */
    int merged;
    const float *x, *bp;
    float *y;
    int64_t gfloats, np;  /* packed floats per group; panels per group */
    int64_t mblocks, nblocks, ncp;
    const mg_epilogue *ep;
    float *scratch;       /* CG_MC * CG_KC floats per thread (merged segments only) */
} cg_call;

static int64_t panels_of(int64_t n) { return (n + MG_GEMM_NR - 1) / MG_GEMM_NR; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Pixel r's rows for K chunk [s0, s0 + kc) of segment seg: x itself, zeros, or a copy */
static const float *chunk_row(const cg_call *g, int64_t base, int64_t r0, int64_t q0,
                              int64_t seg, int64_t s0, int64_t kc, int64_t group,
                              float *copy)
{
    const int64_t i = g->merged ? seg : seg / g->kw;
    const int64_t r = r0 + i * g->dh;
    if (r < 0 || r >= g->h)
        return cg_zeros;
    const int64_t row = base + r * g->w * g->c;
    if (!g->merged) { /* one tap: its channels of the group */
        const int64_t col = q0 + seg % g->kw * g->dw;
        if (col < 0 || col >= g->w)
            return cg_zeros;
        return g->x + row + col * g->c + group * g->cg + s0;
    }
    /* a tap row (groups 1, dilation 1): columns q0 .. q0 + kw - 1, c floats each */
    const int64_t first = q0 + s0 / g->c, last = q0 + (s0 + kc - 1) / g->c;
    if (first >= 0 && last < g->w)
        return g->x + (row + q0 * g->c + s0);
    if (last < 0 || first >= g->w)
        return cg_zeros;
    for (int64_t t = 0; t < kc;) { /* cut by the padding: copy column by column */
        const int64_t idx = s0 + t, col = q0 + idx / g->c, ch = idx % g->c;
        const int64_t run = min64(g->c - ch, kc - t);
        if (col < 0 || col >= g->w)
            memset(copy + t, 0, (size_t)run * sizeof(float));
        else
            memcpy(copy + t, g->x + row + col * g->c + ch, (size_t)run * sizeof(float));
        t += run;
    }
    return copy;
}

static void cg_item(void *ctx, int64_t item, int tid)
{
    const cg_call *g = ctx;
    const int mr = g->t->mr;
    const int64_t per_group = g->mblocks * g->nblocks;
    const int64_t group = item / per_group, rest = item % per_group;
    const int64_t m0 = rest / g->nblocks * CG_MC, p0 = rest % g->nblocks * g->ncp;
    const int64_t rows = min64(g->m - m0, CG_MC), p1 = min64(p0 + g->ncp, g->np);
    int64_t base[CG_MC], r0[CG_MC], q0[CG_MC];
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t pix = m0 + r, img = pix / (g->oh * g->ow), pq = pix % (g->oh * g->ow);
        base[r] = img * g->h * g->w * g->c;
        r0[r] = pq / g->ow * g->sh - g->pt;
        q0[r] = pq % g->ow * g->sw - g->pl;
    }
    const float *ptrs[CG_MC + GEMM_MR_MAX];
    float *scratch = g->scratch ? g->scratch + (int64_t)tid * CG_MC * CG_KC : NULL;
    const float *bg = g->bp + group * g->gfloats;
    float *yg = g->y + group * g->cog;
    for (int64_t seg = 0; seg < g->nseg; ++seg)
        for (int64_t s0 = 0; s0 < g->seglen; s0 += CG_KC) {
            const int64_t kc = min64(g->seglen - s0, CG_KC), kk = seg * g->seglen + s0;
            for (int64_t r = 0; r < rows; ++r)
                ptrs[r] = chunk_row(g, base[r], r0[r], q0[r], seg, s0, kc, group,
                                    scratch ? scratch + r * CG_KC : NULL);
            for (int r = 0; r < mr; ++r)
                ptrs[rows + r] = ptrs[rows - 1];
            for (int64_t p = p0; p < p1; ++p) {
                const int64_t j0 = p * MG_GEMM_NR;
                const int nr = (int)min64(g->cog - j0, MG_GEMM_NR);
                const float *bpp = bg + p * g->k * MG_GEMM_NR + kk * MG_GEMM_NR;
                for (int64_t r = 0; r < rows; r += mr)
                    g->t->micro(kc, ptrs + r, 1, bpp, yg + (m0 + r) * g->co + j0, g->co,
                                (int)min64(rows - r, mr), nr, kk > 0);
            }
        }
    if (g->ep)
        mg_epilogue_tile(g->ep, g->y, g->co, m0 * g->co + group * g->cog + p0 * MG_GEMM_NR,
                         rows, min64(p1 * MG_GEMM_NR, g->cog) - p0 * MG_GEMM_NR);
}

int mg_conv_gemm_forward(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                         int64_t co, int64_t groups, int64_t stride_h, int64_t stride_w,
                         int64_t dilation_h, int64_t dilation_w, int64_t pad_top,
                         int64_t pad_left, int64_t out_h, int64_t out_w, const float *x,
                         const float *packed_f, float *y, const mg_epilogue *epilogue,
                         int num_threads)
{
    if (n < 0 || h < 0 || w < 0 || c < 0 || kh < 0 || kw < 0 || co < 0 || groups < 1 ||
        c % groups || co % groups || stride_h < 1 || stride_w < 1 || dilation_h < 1 ||
        dilation_w < 1 || pad_top < 0 || pad_left < 0 || out_h < 0 || out_w < 0 ||
        (epilogue && mg_epilogue_check(epilogue) != MG_OK))
        return MG_EINVAL;
    const int64_t cg = c / groups, cog = co / groups, k = kh * kw * cg;
    const int64_t m = n * out_h * out_w, gfloats = mg_gemm_packed_floats(k, cog);
    if (gfloats < 0 || (m && co && !y) || (m && k && co && (!x || !packed_f)))
        return MG_EINVAL;
    if (!m || !co)
        return MG_OK;
    if (!k) { /* an empty sum */
        memset(y, 0, (size_t)(m * co) * sizeof(float));
        return epilogue ? mg_channel_epilogue(m, co, y, epilogue, num_threads) : MG_OK;
    }
    const int nt = mg_work_threads(num_threads, (double)m * (double)co * (double)k);
    const int merged = groups == 1 && dilation_w == 1 && kw > 1;
    const int64_t mblocks = (m + CG_MC - 1) / CG_MC, np = panels_of(cog);
    int64_t ncp = np < CG_NC_PANELS ? np : CG_NC_PANELS;
    while (ncp > 1 && groups * mblocks * ((np + ncp - 1) / ncp) < 4 * (int64_t)nt)
        --ncp;
    cg_call g = {gemm_kernels(), h, w, c, kw, co, cg, cog, stride_h, stride_w, dilation_h,
                 dilation_w, pad_top, pad_left, out_h, out_w, m, k,
                 merged ? kh : kh * kw, merged ? kw * c : cg, merged, x, packed_f, y,
                 gfloats, np, mblocks, (np + ncp - 1) / ncp, ncp, epilogue, NULL};
    if (merged && !(g.scratch = mg_alloc_floats((int64_t)nt * CG_MC * CG_KC)))
        return MG_ENOMEM;
    mg_pool_run(nt, groups * mblocks * g.nblocks, cg_item, &g);
    free(g.scratch);
    return MG_OK;
}

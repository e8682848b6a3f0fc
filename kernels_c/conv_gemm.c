/* minigraph native convolution forward as an implicit GEMM: the driver; see conv_gemm.h.
 *
 * An item (group g, block of at most CG_MC output pixels, equal blocks: gemm_block_rows;
 * block of panels) first notes each pixel's
 * image offset and the input row / column of its top-left tap, then walks the K blocks in
 * order (segments: one tap or one tap row, seg_mode; each cut into chunks of at most
 * CG_KC floats). Per K block it points every pixel's row at its chunk (in x, at zeros, or at
 * a copy in the thread's scratch: a row cut by the padding, or every row when neighbouring
 * pixels lie a multiple of 4 KiB apart, gemm_rows_crowd_l1) once, and runs the micro-kernel
 * over every (panel, group of at most mr pixels that read x in that block: a pixel whose
 * taps there all lie in the padding skips it; the narrow micro-kernel, with its own mr, for
 * a panel of at most 16 output channels, as a grouped convolution's 8-16 channels per
 * group): the block's rows stay in L2
 * while a panel's chunk of B sits in L1. The last block's micro-kernels apply the epilogue
 * to each tile before storing it (gemm_tail). An output element is written by one item
 * only, its chain in the order conv_gemm.h gives. */
#include "conv_gemm.h"

#include <stdlib.h>
#include <string.h>

#include "gemm_internal.h"

enum { CG_MC = 96, CG_KC = 256, CG_NC_PANELS = 8 };
_Static_assert(CG_KC + 16 <= GEMM_COPY_LD, "a K chunk's copied row fits its stride");

static const float cg_zeros[CG_KC]; /* the row of a tap in the padding */

/* How K is cut into segments, each read in chunks of at most CG_KC floats: per tap row (kw
 * * c floats, in x, zeros or, cut by the padding, a copy; groups 1 and dilation_w 1), else
 * per tap (its group's channels, in x or zeros), also where a tap column lies in the
 * padding for every output column, so that its taps can be skipped (cg_item). (Gathering a
 * grouped convolution's short tap rows into the scratch measured slower than its per-tap
 * blocks.) */
enum seg_mode { SEG_TAP, SEG_ROW };

typedef struct {
    const gemm_kernel_table *t;
    int64_t h, w, c, kh, kw, co, cg, cog, sh, sw, dh, dw, pt, pl, oh, ow;
    int64_t m, k;        /* pixels; K = kh * kw * cg */
    int64_t nseg, seglen; /* segments of K (see seg_mode), floats each */
    int mode;
    const float *x, *bp;
    float *y;
    int64_t gfloats, np;  /* packed floats per group; panels per group */
    int64_t mc, mblocks, nblocks, ncp; /* pixels per M block (gemm_block_rows), blocks */
    const mg_epilogue *ep;
    float *scratch;       /* CG_MC rows of GEMM_COPY_LD floats per thread (SEG_ROW, copy) */
    int copy;             /* copy every row in x per chunk (gemm_rows_crowd_l1) */
} cg_call;

static int64_t panels_of(int64_t n) { return (n + MG_GEMM_NR - 1) / MG_GEMM_NR; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Floats [s0, s0 + kc) of a pixel's tap row (float s0 + j * cg + ci: column q0 + j * dw,
 * channel ci; `row` at channel 0 of column 0), zero in the padding, into dst */
static void gather_row(const cg_call *g, const float *row, int64_t q0, int64_t s0,
                       int64_t kc, float *dst)
{
    int64_t j = s0 / g->cg, ci = s0 % g->cg;
    for (int64_t t = 0; t < kc; ++j, ci = 0) {
        const int64_t col = q0 + j * g->dw, run = min64(g->cg - ci, kc - t);
        if (col < 0 || col >= g->w)
            memset(dst + t, 0, (size_t)run * sizeof(float));
        else
            memcpy(dst + t, row + col * g->c + ci, (size_t)run * sizeof(float));
        t += run;
    }
}

/* Whether a pixel's K chunk reads only the padding: its tap row r0 + i * dh lies outside x,
 * or its tap's column q0 + j * dw (per tap), or the chunk's columns q0 + [jf, jl] all (per
 * tap row) */
static int chunk_in_padding(const cg_call *g, int64_t r0, int64_t q0, int64_t i, int64_t j,
                            int64_t jf, int64_t jl)
{
    const int64_t r = r0 + i * g->dh;
    if (r < 0 || r >= g->h)
        return 1;
    if (g->mode == SEG_TAP)
        return q0 + j * g->dw < 0 || q0 + j * g->dw >= g->w;
    return q0 + jl < 0 || q0 + jf >= g->w;
}

/* Every pixel's row pointer (rows of the item) for K chunk [s0, s0 + kc) of tap row i (tap
 * (i, j) per tap): into x, at zeros, or at a copy in `scratch` (row stride GEMM_COPY_LD:
 * rows cut by the padding, and with g->copy every row that lies in x) */
static void chunk_rows(const cg_call *g, const int64_t *base, const int64_t *r0,
                       const int64_t *q0, const int64_t *origin, int64_t rows, int64_t i,
                       int64_t j, int64_t s0, int64_t kc, int64_t group, float *scratch,
                       const float **ptrs)
{
    if (g->mode == SEG_TAP) { /* pixels whose window lies inside x: their origin + the tap */
        const float *tap = g->x + (i * g->dh * g->w + j * g->dw) * g->c + group * g->cg + s0;
        for (int64_t p = 0; p < rows; ++p)
            if (origin[p] >= 0)
                ptrs[p] = tap + origin[p];
    }
    /* SEG_ROW: the chunk's first and last columns, relative to q0 */
    const int64_t jf = s0 / g->cg * g->dw, jl = (s0 + kc - 1) / g->cg * g->dw;
    for (int64_t p = 0; p < rows; ++p) {
        if (g->mode == SEG_TAP && origin[p] >= 0)
            continue;
        if (chunk_in_padding(g, r0[p], q0[p], i, j, jf, jl)) {
            ptrs[p] = cg_zeros;
            continue;
        }
        const int64_t row = base[p] + (r0[p] + i * g->dh) * g->w * g->c + group * g->cg;
        if (g->mode == SEG_TAP) { /* one tap: its channels of the group */
            ptrs[p] = g->x + row + (q0[p] + j * g->dw) * g->c + s0;
        } else if (q0[p] + jf >= 0 && q0[p] + jl < g->w) { /* inside */
            ptrs[p] = g->x + (row + q0[p] * g->c + s0);
        } else { /* cut by the padding */
            gather_row(g, g->x + row, q0[p], s0, kc, scratch + p * GEMM_COPY_LD);
            ptrs[p] = scratch + p * GEMM_COPY_LD;
        }
    }
    if (g->copy)
        for (int64_t p = 0; p < rows; ++p)
            if (ptrs[p] != cg_zeros && ptrs[p] != scratch + p * GEMM_COPY_LD) {
                memcpy(scratch + p * GEMM_COPY_LD, ptrs[p], (size_t)kc * sizeof(float));
                ptrs[p] = scratch + p * GEMM_COPY_LD;
            }
}

/* Whether a pixel reads x in K chunk [s0, s0 + kc) of tap row i (tap (i, j) per tap):
 * chunk_rows points its row at zeros otherwise, and the pixel skips the chunk (cg_item) */
static int pixel_live(const cg_call *g, int64_t r0, int64_t q0, int64_t origin, int64_t i,
                      int64_t j, int64_t s0, int64_t kc)
{
    const int64_t jf = s0 / g->cg * g->dw, jl = (s0 + kc - 1) / g->cg * g->dw;
    return (g->mode == SEG_TAP && origin >= 0) || !chunk_in_padding(g, r0, q0, i, j, jf, jl);
}

/* The tail (the epilogue) of the tile of output pixels from m0 at the group's channel j0,
 * or NULL when this is not the last K block or there is no epilogue */
static const gemm_tail *tile_tail(const cg_call *g, int last, int64_t group, int64_t m0,
                                  int64_t j0, gemm_tail *t)
{
    const int64_t ch0 = group * g->cog + j0;
    return last ? gemm_tail_at(g->ep, ch0, m0 * g->co + ch0, g->co, t) : NULL;
}

enum { TAP_BATCH = 16 };

/* The item's tile when one narrow panel holds all the group's outputs (cog <= 16) and K is
 * cut per tap: the taps in batches of TAP_BATCH, each batch one call per tile of the
 * kernel's narrow_taps (the tile's sums stay in registers over the batch's taps: the same
 * chains, tap after tap, as the per-tap loop of cg_item) */
static void taps_item(const cg_call *g, int64_t group, int64_t m0, int64_t rows,
                      const int64_t *base, const int64_t *r0, const int64_t *q0,
                      const int64_t *origin)
{
    enum { STRIDE = CG_MC + GEMM_MR_MAX };
    const float *ptrs[TAP_BATCH * STRIDE];
    const int nr = (int)g->cog, mr = g->t->mr_narrow;
    const float *bg = g->bp + group * g->gfloats;
    float *yg = g->y + group * g->cog;
    for (int64_t t0 = 0; t0 < g->nseg; t0 += TAP_BATCH) {
        const int64_t nb = min64(TAP_BATCH, g->nseg - t0);
        for (int64_t t = 0; t < nb; ++t) {
            const float **pt = ptrs + t * STRIDE;
            const int64_t seg = t0 + t;
            chunk_rows(g, base, r0, q0, origin, rows, seg / g->kw, seg % g->kw, 0, g->cg,
                       group, NULL, pt);
            for (int r = 0; r < GEMM_MR_MAX; ++r)
                pt[rows + r] = pt[rows - 1];
        }
        const float *bpp = bg + t0 * g->cg * MG_GEMM_NR;
        for (int64_t r = 0; r < rows; r += mr) {
            gemm_tail tail;
            g->t->narrow_taps_tail(nb, STRIDE, g->cg, ptrs + r, 1, bpp, yg + (m0 + r) * g->co,
                                   g->co, (int)min64(rows - r, mr), nr, t0 > 0,
                                   tile_tail(g, t0 + nb == g->nseg, group, m0 + r, 0, &tail));
        }
    }
}

static void cg_item(void *ctx, int64_t item, int tid)
{
    const cg_call *g = ctx;
    const int64_t per_group = g->mblocks * g->nblocks;
    const int64_t group = item / per_group, rest = item % per_group;
    const int64_t m0 = rest / g->nblocks * g->mc, p0 = rest % g->nblocks * g->ncp;
    const int64_t rows = min64(g->m - m0, g->mc), p1 = min64(p0 + g->ncp, g->np);
    int64_t base[CG_MC], r0[CG_MC], q0[CG_MC], origin[CG_MC];
    const int64_t span_h = (g->kh - 1) * g->dh, span_w = (g->kw - 1) * g->dw;
    { /* the pixels (image, p, q) of rows m0 .. m0 + rows - 1, walked without divisions */
        const int64_t plane = g->oh * g->ow;
        int64_t img = m0 / plane, p = m0 % plane / g->ow, q = m0 % g->ow;
        for (int64_t r = 0; r < rows; ++r) {
            base[r] = img * g->h * g->w * g->c;
            r0[r] = p * g->sh - g->pt;
            q0[r] = q * g->sw - g->pl;
            /* x offset of the window's top-left tap, -1 where the window leaves x */
            origin[r] = r0[r] >= 0 && r0[r] + span_h < g->h && q0[r] >= 0 && q0[r] + span_w < g->w
                            ? base[r] + (r0[r] * g->w + q0[r]) * g->c
                            : -1;
            if (++q == g->ow) {
                q = 0;
                if (++p == g->oh) {
                    p = 0;
                    ++img;
                }
            }
        }
    }
    const float *ptrs[CG_MC + GEMM_MR_MAX];
    if (g->mode == SEG_TAP && g->cog <= GEMM_NR_NARROW && g->cg <= CG_KC &&
        g->t->narrow_taps_tail) {
        taps_item(g, group, m0, rows, base, r0, q0, origin);
        return;
    }
    float *scratch = g->scratch ? g->scratch + (int64_t)tid * CG_MC * GEMM_COPY_LD : NULL;
    const float *bg = g->bp + group * g->gfloats;
    float *yg = g->y + group * g->cog;
    /* Each pixel skips the K chunks it reads only zeros from (its window's taps in the
     * padding: the border pixels' taps over a small image's edge), so each pixel's sums run
     * over its own live chunks: the first starts them, the last applies the epilogue. A
     * skipped chunk would add 0 * f to sums that start at +0 and so are never -0, which
     * leaves them as they are for a finite filter (the caller keeps a non-finite one off
     * the padding). A pixel with no live chunk runs the first chunk (all zeros). Per chunk,
     * the pixels that run it are cut into runs of consecutive rows sharing those two roles,
     * each run in tiles of at most mr rows. */
    int64_t first[CG_MC], last[CG_MC];
    for (int64_t p = 0; p < rows; ++p)
        first[p] = -1, last[p] = 0;
    for (int64_t seg = 0; seg < g->nseg; ++seg)
        for (int64_t s0 = 0; s0 < g->seglen; s0 += CG_KC) {
            const int64_t i = g->mode == SEG_ROW ? seg : seg / g->kw, kk = seg * g->seglen + s0;
            const int64_t kc = min64(g->seglen - s0, CG_KC);
            for (int64_t p = 0; p < rows; ++p)
                if (pixel_live(g, r0[p], q0[p], origin[p], i, seg % g->kw, s0, kc)) {
                    last[p] = kk;
                    if (first[p] < 0)
                        first[p] = kk;
                }
        }
    for (int64_t p = 0; p < rows; ++p)
        if (first[p] < 0)
            first[p] = 0;
    int64_t run_start[CG_MC], run_len[CG_MC];
    int run_load[CG_MC], run_tail[CG_MC];
    for (int64_t seg = 0; seg < g->nseg; ++seg)
        for (int64_t s0 = 0; s0 < g->seglen; s0 += CG_KC) {
            const int64_t kc = min64(g->seglen - s0, CG_KC), kk = seg * g->seglen + s0;
            const int64_t i = g->mode == SEG_ROW ? seg : seg / g->kw;
            int64_t runs = 0;
            for (int64_t p = 0; p < rows; ++p) {
                if (kk != first[p] && (kk > last[p] || kk < first[p] ||
                                       !pixel_live(g, r0[p], q0[p], origin[p], i,
                                                   seg % g->kw, s0, kc)))
                    continue;
                const int load = kk > first[p], tail = kk >= last[p];
                if (runs && run_start[runs - 1] + run_len[runs - 1] == p &&
                    run_load[runs - 1] == load && run_tail[runs - 1] == tail) {
                    ++run_len[runs - 1];
                } else {
                    run_start[runs] = p, run_len[runs] = 1;
                    run_load[runs] = load, run_tail[runs] = tail;
                    ++runs;
                }
            }
            if (!runs)
                continue;
            chunk_rows(g, base, r0, q0, origin, rows, i, seg % g->kw, s0, kc, group, scratch, ptrs);
            for (int r = 0; r < GEMM_MR_MAX; ++r)
                ptrs[rows + r] = ptrs[rows - 1];
            for (int64_t p = p0; p < p1; ++p) {
                const int64_t j0 = p * MG_GEMM_NR;
                const int nr = (int)min64(g->cog - j0, MG_GEMM_NR);
                const float *bpp = bg + p * g->k * MG_GEMM_NR + kk * MG_GEMM_NR;
                int mr;
                const gemm_micro_tail_fn micro = gemm_micro_tail_for(g->t, nr, &mr);
                for (int64_t u = 0; u < runs; ++u)
                    for (int64_t r = run_start[u]; r < run_start[u] + run_len[u]; r += mr) {
                        gemm_tail tail;
                        micro(kc, ptrs + r, 1, bpp, yg + (m0 + r) * g->co + j0, g->co,
                              (int)min64(run_start[u] + run_len[u] - r, mr), nr, run_load[u],
                              tile_tail(g, run_tail[u], group, m0 + r, j0, &tail));
                    }
            }
        }
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
    /* a tap column in the padding for every output column (a few-pixel-wide image): per
     * tap, so that cg_item skips that column's taps */
    const int dead_column = (out_w - 1) * stride_w - pad_left < 0 || kw - 1 - pad_left >= w;
    const int mode = kw > 1 && groups == 1 && dilation_w == 1 && !dead_column ? SEG_ROW
                                                                              : SEG_TAP;
    const int64_t nseg = mode == SEG_ROW ? kh : kh * kw;
    const int64_t mc = gemm_block_rows(m, CG_MC), mblocks = (m + mc - 1) / mc;
    const int64_t np = panels_of(cog);
    int64_t ncp = np < CG_NC_PANELS ? np : CG_NC_PANELS;
    while (ncp > 1 && groups * mblocks * ((np + ncp - 1) / ncp) < 4 * (int64_t)nt)
        --ncp;
    ncp = (np + (np + ncp - 1) / ncp - 1) / ((np + ncp - 1) / ncp); /* blocks of equal size */
    cg_call g = {gemm_kernels(), h, w, c, kh, kw, co, cg, cog, stride_h, stride_w, dilation_h,
                 dilation_w, pad_top, pad_left, out_h, out_w, m, k,
                 nseg, k / nseg, mode, x, packed_f, y,
                 gfloats, np, mc, mblocks, (np + ncp - 1) / ncp, ncp, epilogue, NULL, 0};
    /* neighbouring pixels' rows are stride_w * c floats apart: copied where that crowds the
     * L1 and more than one panel reads the copy (not on the narrow tap batches' route) */
    g.copy = ncp > 1 && gemm_rows_crowd_l1(stride_w * c * (int64_t)sizeof(float));
    if ((mode == SEG_ROW || g.copy) &&
        !(g.scratch = mg_alloc_floats((int64_t)nt * CG_MC * GEMM_COPY_LD)))
        return MG_ENOMEM;
    mg_pool_run(nt, groups * mblocks * g.nblocks, cg_item, &g);
    free(g.scratch);
    return MG_OK;
}

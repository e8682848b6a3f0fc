/* minigraph native convolution gradients on the GEMM micro-kernels: see conv_gemm_grad.h.
 *
 * Input gradient: an implicit GEMM per stride phase. The dx pixels (Y, X) with
 * Y mod sh = py and X mod sw = px (a phase) are reached by the same taps: tap row i when
 * (py + pt - i*dh) is a multiple of sh, through dy row a + di with di = (py + pt - i*dh) / sh
 * (Y = py + a*sh), and likewise for columns. So for one phase dx = A * B with M = the phase's
 * pixels, N = cig (one group) and K = its taps x cog: A's row for pixel m and tap t is the
 * dy pixel (a + di, b + dj) of m's image, cog contiguous floats (or a row of zeros where
 * that pixel lies outside dy), read in place by the micro-kernel's row pointers; B is the
 * filter transposed per group and phase to [the phase's taps (i ascending, j descending)
 * x cog][cig], packed once into 32-column panels, the phases one after the other (with
 * cig <= 16 the narrow micro-kernel runs the one half-empty panel, gemm_internal.h).
 * A tile is up to TILE_PIXELS consecutive pixels of one phase row (b0 .. b0 + cnt - 1 of
 * dx row Y, column phase px): they read consecutive dy pixels through every tap (a range
 * of them inside dy, zero rows outside), and their dx pixels are sw * c floats apart, so
 * the micro-kernel stores the C tile in dx in place (ldc = sw * c; no scratch, no copy).
 * Per panel, a tile runs each run of consecutive taps that reach some of its pixels in one
 * call of the kernel over all of them (gemm_kernel_table.narrow_taps / micro_taps: the
 * tile in registers for all its K; for wide panels where cog <= KC or the block has one
 * panel, which measured 94 -> 102 GFLOP/s on 1 thread for 64-channel stride-2 layers,
 * against a C tile stored and loaded again per tap), else tap by tap, per block of KC of
 * cog, per panel (the block of A reused from L1 across the panels). Items of the worker
 * pool: (group, block of panels, image, block of dx rows); an item first writes the zeros
 * of its rows' phases that no tap reaches (the whole row, contiguous, where it owns every
 * channel: for a 1x1 stride-2 convolution 3/4 of dx), then the tiles. A tap that reaches
 * no pixel of a tile is left out of its chain (no term); a tile no tap reaches is written
 * as zero.
 *
 * Filter gradient: df = im2col(x)^T * dy per group, C written in df's HWIO layout (ldc = co):
 * M = kh*kw*cig (C row m = tap m / cig, channel m % cig), N = cog (panels of 32), K = the
 * output pixels. Why not the transpose (dy^T * im2col(x), im2col packed as B), as before:
 * that packing copied kh*kw*cig floats per pixel for every block of panels (28% of a
 * stride-2 3x3 16->32 gradient, profiled) and the first layers' few panels gave the threads
 * uneven items (a stride-2 16->32 layer ran no faster on 2 threads than on 1). Here A is x
 * itself, through the micro-kernel's row pointers: along one output row the pixels are
 * sw * c floats apart in every row of A, so an output row is one segment (row i at the
 * pixel's window origin plus its tap offset), and the wide micro-kernel (micro_segs;
 * narrow_segs for <= 16 columns) runs all the rows of a block with the tile in registers.
 * x is read in place also where windows cross its edges: a tile cuts each output row at
 * the columns where one of its tap columns leaves x (a 3x3 stride-2 SAME layer: its last
 * pixel), into segments in which each row of the tile reads x throughout or a buffer of
 * zeros (as does a tap row outside x); the segments differ in length, so the _segs kernels
 * take one length each. (This replaced a zero-padded copy of x, made first: about x's
 * size, 0.05-0.1 ms of a ResNet-8 stride-2 layer, and the pointer table per segment now
 * keeps a tile's own rows, not the tallest kernel's: 1 thread 0.87 -> 0.78 ms.) B is dy's
 * columns of a panel, packed per block of output rows (dy itself when co is 32: one panel
 * of 32-float rows). Per block an item packs B for its panels (up to FILTER_NCP), then per
 * tile of C rows builds the row pointers once for all of them. Items: (group, chunk of
 * output rows, block of panels, block of tiles); the chunks (a function of the shapes only,
 * mg_conv2d_gemm_filter_chunks) give few-panel layers enough items and write partial sums
 * added in chunk order by a last pass; blocks of tiles only where the threads still lack
 * items (each packs its B again, so they are the last resort).
 */
#include "conv_gemm_grad.h"

#include <stdlib.h>
#include <string.h>

#include "gemm_internal.h"

/* TILE_PIXELS: the most pixels of an input gradient tile: the narrow kernel's 24 rows would
 * keep 24 row pointers, more than the general registers, and ran ~10% slower than 8-12 */
enum { MB = 96, KC = 256, TILE_PIXELS = 12, NCP_MAX = 8 };
/* The filter gradient's blocks of about FILTER_KC output pixels (whole output rows), and
 * ranges of output rows (chunks) of at least CHUNK_MIN pixels while there are fewer than
 * FILTER_ITEMS (group, panel, chunk) items, their partial sums at most PARTS_MAX floats */
enum { FILTER_KC = 256, FILTER_NCP = 4, FILTER_ITEMS = 16, CHUNK_MIN = 512 };
/* The filter gradient reads x in place unless an output row's segments times SEGMENT_COST
 * exceed its pixels times the 16-float vectors of C a tile's row pointers serve (the
 * pointers per FMA): then from a zero-padded copy. Measured (1 thread, CPU time, noisy),
 * ms copy / in place: ResNet-8 3x3 s2 16->32 (2 segments of 16 pixels, 2 vectors) 0.87 /
 * 0.78; 3x3 s1 16->16 32x32 (3 of 32, 1) 2.23-2.32 / 2.43-2.48; 64->64 8x8 (3 of 8, 4)
 * 1.50-1.53 / 1.57-1.58. */
enum { SEGMENT_COST = 16 };
enum { PARTS_MAX = 1 << 22 };

static const gemm_kernel_table *kernels(void)
{
    static const void *const tables[MG_NISA] =
        MG_ISA_TABLES(&gemm_kernels_scalar, &gemm_kernels_avx2, &gemm_kernels_avx512);
    return mg_isa_pick(tables);
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
/* Per-thread tables of `count` items of `size` bytes each start a cache line apart (two
 * threads writing one line, a tile's pointers or flags, made the input gradient of a
 * stride-2 layer 1.4x slower on 2 threads, depending on where malloc put the table) */
static int64_t line_items(int64_t count, int64_t size)
{
    const int64_t per_line = 64 / size;
    return (count + per_line - 1) / per_line * per_line;
}

/* `bytes` (> 0) on whole cache lines, or NULL */
static void *alloc_lines(int64_t bytes) { return aligned_alloc(64, (size_t)((bytes + 63) & ~63)); }

static int64_t floor_mod(int64_t a, int64_t b)
{
    const int64_t r = a % b;
    return r < 0 ? r + b : r;
}

typedef struct {
    int64_t n, h, w, c, kh, kw, co, groups, sh, sw, dh, dw, pt, pl, oh, ow, cig, cog;
} geometry;

static int geometry_check(const geometry *g)
{
    if (g->n < 0 || g->h < 0 || g->w < 0 || g->c < 0 || g->kh < 0 || g->kw < 0 || g->co < 0 ||
        g->groups < 1 || g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->pt < 0 ||
        g->pl < 0 || g->oh < 0 || g->ow < 0 || g->c % g->groups || g->co % g->groups)
        return MG_EINVAL;
    return MG_OK;
}

/* Blocks of up to NCP_MAX panels (of equal sizes: 4 panels as 2 + 2, not 3 + 1, so that the
 * items weigh the same), fewer while the items would not give every thread about
 * 4 (the split changes no result: each element's chain is the same). */
static int64_t panels_per_block(int64_t panels, int64_t other_items, int nt)
{
    int64_t ncp = min64(panels, NCP_MAX);
    while (ncp > 1 && other_items * ceil_div(panels, ncp) < 4 * (int64_t)nt)
        --ncp;
    return ncp < 1 ? 1 : ceil_div(panels, ceil_div(panels, ncp)); /* blocks of equal size */
}

/* ------------------------------------------------------------------------------------------ */
/* Input gradient                                                                              */

typedef struct {
    int64_t tap, delta; /* filter row (column) and the dy row (column) offset of the phase */
} phase_tap;

typedef struct {
    const gemm_kernel_table *t;
    geometry g;
    const float *dy, *packed, *zeros; /* zeros: cog floats */
    float *dx;
    const phase_tap *row_taps, *col_taps; /* [py][kh], [px][kw] (columns: j descending) */
    const int64_t *nrow, *ncol, *phase_k; /* phase_k[py * phx + px]: its first B row / cog */
    const float **rows; /* per thread: (max_taps + 1) * GEMM_MR_MAX, from a cache line */
    unsigned char *live; /* per thread: max_taps, from a cache line */
    int64_t phx, panels, ncp, nblocks, k_group, row_block, row_blocks, max_taps;
    int64_t thread_rows, thread_live; /* the per-thread strides of rows and live */
    int mr; /* pixels per tile: the rows of the first panel's micro-kernel */
} input_call;

typedef struct {
    const input_call *b;
    const float *f;
    float *packed;
} pack_filter_call;

/* packed[g][p][(phase_k[py][px] + ti * ncol[px] + tj) * cog + o][jj] = f[i][j][32p + jj]
 * [g*cog + o] for the phase's row tap ti (filter row i) and column tap tj (filter column j,
 * descending), zero past cig: each phase's taps in its summation order, one after the other,
 * so that one run of B serves a phase's consecutive taps. */
static void pack_filter(void *ctx, int64_t lo, int64_t hi)
{
    const pack_filter_call *pc = ctx;
    const input_call *b = pc->b;
    const geometry *g = &b->g;
    const int64_t phy = min64(g->sh, g->h);
    for (int64_t gp = lo; gp < hi; ++gp) {
        const int64_t grp = gp / b->panels, p = gp % b->panels;
        float *dst = pc->packed + gp * b->k_group * MG_GEMM_NR;
        const int64_t j0 = p * MG_GEMM_NR, width = min64(MG_GEMM_NR, g->cig - j0);
        if (width < MG_GEMM_NR)
            memset(dst, 0, (size_t)(b->k_group * MG_GEMM_NR) * sizeof(float));
        for (int64_t py = 0; py < phy; ++py)
            for (int64_t px = 0; px < b->phx; ++px)
                for (int64_t ti = 0; ti < b->nrow[py]; ++ti)
                    for (int64_t tj = 0; tj < b->ncol[px]; ++tj) {
                        const int64_t tap = b->row_taps[py * g->kh + ti].tap * g->kw +
                                            b->col_taps[px * g->kw + tj].tap;
                        const int64_t row = b->phase_k[py * b->phx + px] + ti * b->ncol[px] + tj;
                        for (int64_t jj = 0; jj < width; ++jj) {
                            const float *src = pc->f + (tap * g->cig + j0 + jj) * g->co +
                                               grp * g->cog;
                            float *d = dst + row * g->cog * MG_GEMM_NR + jj;
                            for (int64_t o = 0; o < g->cog; ++o)
                                d[o * MG_GEMM_NR] = src[o];
                        }
                    }
    }
}

/* Zeros in `width` floats at dst, `count` times `stride` floats apart */
static void zero_strided(float *dst, int64_t count, int64_t stride, int64_t width)
{
    for (int64_t i = 0; i < count; ++i, dst += stride)
        for (int64_t j = 0; j < width; ++j)
            dst[j] = 0.0f;
}

/* The tile of `cnt` pixels b0 .. b0 + cnt - 1 of phase row a (dx row y) and phase column px,
 * columns of panels p0 .. p1 - 1: every tap of the phase in order, a pixel a tap does not
 * reach reading zeros (a tap that reaches no pixel of the tile is left out), its C tile
 * stored in dx in place (the tile's pixels are sw * c floats apart). Per panel, the
 * micro-kernel over each run of consecutive taps in one call where the ISA has it (the
 * tile stays in registers; wide panels where cog <= KC or the block has one panel); else
 * per tap, per block of KC of its cog, per panel (the block of A reused from L1 across
 * the panels). rows: the thread's table of
 * GEMM_MR_MAX pointers per tap, then as many for a block's. */
static void input_tile(const input_call *b, const float **rows, unsigned char *live,
                       int64_t grp, int64_t img, int64_t y, int64_t px, int64_t b0, int cnt,
                       int64_t p0, int64_t p1)
{
    const geometry *g = &b->g;
    const int64_t py = y % g->sh, a = y / g->sh;
    const int64_t nrt = b->nrow[py], nct = b->ncol[px], ntaps = nrt * nct;
    const phase_tap *rt = b->row_taps + py * g->kh, *ct = b->col_taps + px * g->kw;
    const int fill = b->t->exact_rows ? cnt : GEMM_MR_MAX; /* the rows the kernels read */
    for (int64_t ti = 0; ti < nrt; ++ti) {
        const int64_t dyr = a + rt[ti].delta;
        const int row_in = dyr >= 0 && dyr < g->oh;
        for (int64_t tj = 0; tj < nct; ++tj) {
            const int64_t t = ti * nct + tj, first = b0 + ct[tj].delta; /* pixel 0's dy column */
            const float **r = rows + t * GEMM_MR_MAX;
            /* the pixels i in [lo, hi) read dy pixels inside dy, one after the other */
            const int lo = row_in ? (int)min64(cnt, max64(0, -first)) : cnt;
            const int hi = row_in ? (int)max64(lo, min64(cnt, g->ow - first)) : cnt;
            const float *src = b->dy + ((img * g->oh + dyr) * g->ow + first) * g->co +
                               grp * g->cog;
            int i = 0;
            for (; i < lo; ++i)
                r[i] = b->zeros;
            for (; i < hi; ++i)
                r[i] = src + i * g->co;
            for (; i < cnt; ++i)
                r[i] = b->zeros;
            for (; i < fill; ++i)
                r[i] = r[cnt - 1];
            live[t] = hi > lo;
        }
    }
    float *c = b->dx + ((img * g->h + y) * g->w + px + b0 * g->sw) * g->c + grp * g->cig;
    const int64_t ldc = g->sw * g->c, kc_all = g->cog;
    const float *group_b = b->packed + (grp * b->panels * b->k_group +
                                        b->phase_k[py * b->phx + px] * g->cog) * MG_GEMM_NR;
    int started = 0;
    if (b->t->narrow_taps && b->t->micro_taps && (kc_all <= KC || p1 - p0 == 1)) {
        /* per panel, each run of live taps in one call (the tile in registers) */
        for (int64_t p = p0; p < p1; ++p) {
            const int nr = (int)min64(MG_GEMM_NR, g->cig - p * MG_GEMM_NR);
            const float *bp = group_b + p * b->k_group * MG_GEMM_NR;
            int on = 0;
            for (int64_t t0 = 0, t1; t0 < ntaps; t0 = t1) {
                for (t1 = t0 + 1; t1 < ntaps && live[t1] == live[t0];)
                    ++t1;
                if (live[t0]) {
                    (nr <= GEMM_NR_NARROW ? b->t->narrow_taps : b->t->micro_taps)(
                        t1 - t0, GEMM_MR_MAX, kc_all, rows + t0 * GEMM_MR_MAX, 1,
                        bp + t0 * kc_all * MG_GEMM_NR, c + p * MG_GEMM_NR, ldc, cnt, nr, on);
                    on = 1;
                }
            }
            started = on;
        }
    } else {
        const float **block = rows + ntaps * GEMM_MR_MAX;
        for (int64_t t = 0; t < ntaps; ++t) {
            for (int64_t k0 = 0; live[t] && k0 < kc_all; k0 += KC) {
                const int64_t kc = min64(KC, kc_all - k0);
                for (int i = 0; i < fill; ++i)
                    block[i] = rows[t * GEMM_MR_MAX + i] + k0;
                for (int64_t p = p0; p < p1; ++p) {
                    const int nr = (int)min64(MG_GEMM_NR, g->cig - p * MG_GEMM_NR);
                    int tile_mr;
                    const gemm_micro_fn micro = gemm_micro_for(b->t, nr, &tile_mr);
                    micro(kc, block, 1,
                          group_b + (p * b->k_group + t * kc_all + k0) * MG_GEMM_NR,
                          c + p * MG_GEMM_NR, ldc, cnt, nr, started || k0 > 0);
                }
            }
            started |= live[t];
        }
    }
    if (!started)
        for (int64_t p = p0; p < p1; ++p)
            zero_strided(c + p * MG_GEMM_NR, cnt, ldc, min64(MG_GEMM_NR, g->cig - p * MG_GEMM_NR));
}

/* Item (group, block of panels, image, block of dx rows): per dx row, its row phase's
 * pixels of every column phase in tiles of at most mr; the pixels no tap reaches (a phase
 * without taps) are zeros, written first (the whole row, contiguous, when the item owns
 * all its channels). */
static void input_item(void *ctx, int64_t item, int tid)
{
    const input_call *b = ctx;
    const geometry *g = &b->g;
    const int64_t rb = item % b->row_blocks, img = item / b->row_blocks % g->n;
    const int64_t pb = item / (b->row_blocks * g->n) % b->nblocks;
    const int64_t grp = item / (b->row_blocks * g->n * b->nblocks);
    const int64_t p0 = pb * b->ncp, p1 = min64(p0 + b->ncp, b->panels);
    const int64_t col0 = grp * g->cig + p0 * MG_GEMM_NR;
    const int64_t width = min64(g->cig, p1 * MG_GEMM_NR) - p0 * MG_GEMM_NR;
    const int whole = width == g->c; /* the item owns every channel of its rows */
    const int64_t y1 = min64(g->h, (rb + 1) * b->row_block);
    const float **rows = b->rows + (int64_t)tid * b->thread_rows;
    unsigned char *live = b->live + (int64_t)tid * b->thread_live;
    for (int64_t y = rb * b->row_block; y < y1; ++y) {
        const int64_t py = y % g->sh;
        float *row = b->dx + (img * g->h + y) * g->w * g->c;
        int gaps = b->nrow[py] == 0;
        for (int64_t px = 0; px < b->phx; ++px)
            gaps |= b->ncol[px] == 0;
        if (gaps && whole)
            memset(row, 0, (size_t)(g->w * g->c) * sizeof(float));
        else if (gaps)
            for (int64_t px = 0; px < b->phx; ++px)
                if (b->nrow[py] == 0 || b->ncol[px] == 0)
                    zero_strided(row + px * g->c + col0, ceil_div(g->w - px, g->sw),
                                 g->sw * g->c, width);
        if (b->nrow[py] == 0)
            continue;
        for (int64_t px = 0; px < b->phx; ++px) {
            if (b->ncol[px] == 0)
                continue;
            const int64_t bw = ceil_div(g->w - px, g->sw), tiles = ceil_div(bw, b->mr);
            for (int64_t t = 0; t < tiles; ++t) { /* tiles of balanced sizes */
                const int64_t b0 = bw * t / tiles, b1 = bw * (t + 1) / tiles;
                input_tile(b, rows, live, grp, img, y, px, b0, (int)(b1 - b0), p0, p1);
            }
        }
    }
}

/* The taps of each phase along one axis: for origin v < phases, the taps t < k with
 * (v + pad - t*dil) a multiple of stride (ascending, or descending when `descending`), and
 * their offsets (v + pad - t*dil) / stride. */
static void phase_taps(int64_t phases, int64_t k, int64_t stride, int64_t dil, int64_t pad,
                       int descending, phase_tap *taps, int64_t *counts)
{
    for (int64_t v = 0; v < phases; ++v) {
        counts[v] = 0;
        for (int64_t u = 0; u < k; ++u) {
            const int64_t t = descending ? k - 1 - u : u, off = v + pad - t * dil;
            if (floor_mod(off, stride) == 0)
                taps[v * k + counts[v]++] = (phase_tap){t, (off - floor_mod(off, stride)) / stride};
        }
    }
}

int mg_conv2d_gemm_backprop_input(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                                  int64_t kw, int64_t co, int64_t groups, int64_t stride_h,
                                  int64_t stride_w, int64_t dilation_h, int64_t dilation_w,
                                  int64_t pad_top, int64_t pad_left, int64_t out_h,
                                  int64_t out_w, const float *f, const float *dy, float *dx,
                                  int num_threads)
{
    const geometry g = {n, h, w, c, kh, kw, co, groups, stride_h, stride_w, dilation_h,
                        dilation_w, pad_top, pad_left, out_h, out_w, groups ? c / groups : 0,
                        groups ? co / groups : 0};
    if (geometry_check(&g) != MG_OK)
        return MG_EINVAL;
    const int64_t dx_size = n * h * w * c;
    if (!dx_size)
        return MG_OK;
    if (!dx || (kh * kw * co != 0 && !f) || (n * out_h * out_w * co != 0 && !dy))
        return MG_EINVAL;
    if (kh * kw * g.cog == 0 || out_h * out_w == 0) { /* no term: zeros */
        memset(dx, 0, (size_t)dx_size * sizeof(float));
        return MG_OK;
    }
    const int64_t phy = min64(stride_h, h), phx = min64(stride_w, w);
    const int64_t panels = ceil_div(g.cig, MG_GEMM_NR);
    const int nt = mg_work_threads(num_threads, (double)dx_size * (double)(kh * kw * g.cog) /
                                                    (double)(stride_h * stride_w));
    phase_tap *row_taps = malloc((size_t)(phy * kh + phx * kw) * sizeof(phase_tap));
    int64_t *counts = malloc((size_t)(phy + phx + phy * phx) * sizeof(int64_t));
    float *zeros = calloc((size_t)g.cog, sizeof(float)), *packed = NULL;
    const float **rows = NULL;
    unsigned char *live = NULL;
    int code = MG_ENOMEM;
    if (!row_taps || !counts || !zeros)
        goto done;
    phase_tap *col_taps = row_taps + phy * kh;
    int64_t *nrow = counts, *ncol = counts + phy, *phase_k = counts + phy + phx, k_taps = 0;
    int64_t max_taps = 0;
    phase_taps(phy, kh, stride_h, dilation_h, pad_top, 0, row_taps, nrow);
    phase_taps(phx, kw, stride_w, dilation_w, pad_left, 1, col_taps, ncol);
    for (int64_t py = 0; py < phy; ++py)
        for (int64_t px = 0; px < phx; ++px) {
            phase_k[py * phx + px] = k_taps;
            k_taps += nrow[py] * ncol[px];
            max_taps = max64(max_taps, nrow[py] * ncol[px]);
        }
    const int64_t k_group = k_taps * g.cog;
    const int64_t row_block = min64(h, max64(1, ceil_div(MB, w)));
    const int64_t row_blocks = ceil_div(h, row_block);
    const int64_t ncp = panels_per_block(panels, groups * n * row_blocks, nt);
    const int64_t nblocks = ceil_div(panels, ncp);
    packed = mg_alloc_floats(groups * panels * k_group * MG_GEMM_NR);
    const int64_t thread_rows = line_items((max_taps + 1) * GEMM_MR_MAX, sizeof(float *));
    const int64_t thread_live = line_items(max_taps, 1);
    rows = alloc_lines(nt * thread_rows * (int64_t)sizeof(float *));
    live = alloc_lines(nt * thread_live);
    if (!packed || !rows || !live)
        goto done;
    int mr;
    gemm_micro_for(kernels(), (int)min64(g.cig, MG_GEMM_NR), &mr);
    mr = mr < TILE_PIXELS ? mr : TILE_PIXELS;
    input_call call = {kernels(), g, dy, packed, zeros, dx, row_taps, col_taps, nrow, ncol,
                       phase_k, rows, live, phx, panels, ncp, nblocks, k_group, row_block,
                       row_blocks, max_taps, thread_rows, thread_live, mr};
    pack_filter_call pc = {&call, f, packed};
    mg_pool_rows(mg_stream_threads(nt, groups * panels * k_group * MG_GEMM_NR),
                 groups * panels, 1, pack_filter, &pc);
    mg_pool_run(nt, groups * nblocks * n * row_blocks, input_item, &call);
    code = MG_OK;
done:
    free(row_taps);
    free(counts);
    free(packed);
    free(zeros);
    free(rows);
    free(live);
    return code;
}

/* ------------------------------------------------------------------------------------------ */
/* Filter gradient                                                                             */

/* The packing's short copies (a panel's row of dy, up to 32 floats): inline 16-byte moves,
 * not library calls (a call costs as much as such a copy; the attribute keeps GCC from
 * turning the loop back into a memmove call) */
typedef float floats4 __attribute__((vector_size(16), aligned(4), may_alias));
#define NO_LIBCALL __attribute__((optimize("no-tree-loop-distribute-patterns")))

static NO_LIBCALL void copy_floats(float *dst, const float *src, int64_t len)
{
    int64_t j = 0;
    for (; j + 4 <= len; j += 4)
        *(floats4 *)(dst + j) = *(const floats4 *)(src + j);
    for (; j < len; ++j)
        dst[j] = src[j];
}

/* Output rows (n * out_h of them, row r = image r / out_h, row r % out_h) are the filter
 * gradient's unit of K, x read in place: along an output row, tap column j reaches x for the
 * pixels q in [qlo[j], qhi[j]) (elsewhere its window column lies in the padding), so a C
 * tile cuts each output row at its taps' qlo and qhi into segments in which every row of
 * the tile reads x (consecutive pixels, sw * c floats apart) or zeros throughout. */
typedef struct {
    const gemm_kernel_table *t;
    geometry g;
    const float *x, *dy, *zeros; /* zeros: enough for a segment of out_w pixels */
    float *df, *part; /* part: chunks 1 .. nchunks - 1, each df's size and layout */
    const int64_t *qlo, *qhi; /* [kw] */
    int64_t cols, panels, block_rows, chunk_rows, nchunks, ncp, nblocks, nmb, block_pixels;
    int64_t max_cuts; /* the most segments an output row is cut into */
    int direct_b; /* B is dy itself: co == 32, one group */
    float *scratch;
    const float **ptrs; /* per thread (thread_ptrs apart): a tile's rows per segment */
    int64_t *lens; /* per thread (thread_lens apart): the block's segment lengths */
    int64_t thread_ptrs, thread_lens;
} filter_call;

enum { MAX_CUTS = 2 * GEMM_MR_MAX + 2 }; /* a tile's cuts of an output row: its taps' */

/* Where a tile of C rows reads along an output row: its cuts (ascending, from 0 to out_w),
 * and per row i its offset in x from the window origin of the row's pixel 0 (tap row dy[i],
 * column, channel), and per segment s whether each row's tap column reaches x (in[s][i];
 * all_in[s]: every row's) */
typedef struct {
    int64_t cuts[MAX_CUTS], off[GEMM_MR_MAX], dy[GEMM_MR_MAX];
    unsigned char in[MAX_CUTS][GEMM_MR_MAX], all_in[MAX_CUTS];
    int ncuts;
} tile_reach;

/* The reach of C rows m0 .. m0 + valid - 1 (tap m / cig, channel m % cig of group grp), the
 * last one repeated up to `rows` */
static void tile_taps(const filter_call *fc, int64_t grp, int64_t m0, int valid, int rows,
                      tile_reach *tr)
{
    const geometry *g = &fc->g;
    int64_t tap = m0 / g->cig, cc = m0 % g->cig, tj[GEMM_MR_MAX];
    int64_t *cuts = tr->cuts;
    int ncuts = 0;
    cuts[ncuts++] = 0;
    cuts[ncuts++] = g->ow;
    for (int i = 0; i < valid; ++tap, cc = 0) {
        const int64_t j = tap % g->kw, dy = tap / g->kw * g->dh;
        for (; cc < g->cig && i < valid; ++cc, ++i)
            tj[i] = j, tr->dy[i] = dy,
            tr->off[i] = (dy * g->w + j * g->dw) * g->c + grp * g->cig + cc;
        for (int e = 0; e < 2; ++e) { /* insert qlo, qhi of this column (sorted, unique) */
            const int64_t v = e ? fc->qhi[j] : fc->qlo[j];
            int at = 0;
            while (at < ncuts && cuts[at] < v)
                ++at;
            if (at < ncuts && cuts[at] == v)
                continue;
            for (int k = ncuts; k > at; --k)
                cuts[k] = cuts[k - 1];
            cuts[at] = v, ++ncuts;
        }
    }
    for (int i = valid; i < rows; ++i)
        tj[i] = tj[valid - 1], tr->dy[i] = tr->dy[valid - 1], tr->off[i] = tr->off[valid - 1];
    for (int s = 0; s + 1 < ncuts; ++s) {
        tr->all_in[s] = 1;
        for (int i = 0; i < rows; ++i) {
            tr->in[s][i] = cuts[s] >= fc->qlo[tj[i]] && cuts[s] < fc->qhi[tj[i]];
            tr->all_in[s] &= tr->in[s][i];
        }
    }
    tr->ncuts = ncuts;
}

/* nseg segments (lengths kcs) through the ISA's kernel that keeps the tile in registers
 * over them (the _taps one where they all have one length: `uniform`), or one call per
 * segment (the same chains: a call continues from the floats stored before) */
static void run_segments(const gemm_kernel_table *t, int nr, int64_t nseg, int64_t rstride,
                         const int64_t *kcs, int uniform, const float **rows, int64_t ks,
                         const float *bp, float *c, int64_t ldc, int mr, int load)
{
    const int narrow = nr <= GEMM_NR_NARROW;
    const gemm_segs_fn segs = narrow ? t->narrow_segs : t->micro_segs;
    void (*const taps)(int64_t, int64_t, int64_t, const float *const *, int64_t, const float *,
                       float *, int64_t, int, int, int) = narrow ? t->narrow_taps : t->micro_taps;
    if (uniform && taps) {
        taps(nseg, rstride, kcs[0], rows, ks, bp, c, ldc, mr, nr, load);
        return;
    }
    if (segs) {
        segs(nseg, rstride, kcs, rows, ks, bp, c, ldc, mr, nr, load);
        return;
    }
    int tr;
    const gemm_micro_fn micro = gemm_micro_for(t, nr, &tr);
    for (int64_t s = 0; s < nseg; bp += kcs[s] * MG_GEMM_NR, ++s)
        micro(kcs[s], rows + s * rstride, ks, bp, c, ldc, mr, nr, load || s);
}

/* Item (group, chunk, block of panels p0 .. p1 - 1, block of C row tiles): per block of
 * output rows [r0, r1) of the chunk, B = dy's columns of each panel (packed, unless dy is B
 * itself); then per tile of C rows (taps x channels) its row pointers per segment of each
 * output row (row i: x at the segment's first pixel through row i's tap, or zeros where
 * that tap lies in the padding for the whole segment; k step sw * c), used by every panel:
 * one chain over the block's pixels. C is df (chunk 0) or the chunk's partial sums, ldc =
 * co. The tile height is the first panel's kernel's (a narrow last panel in a block of wide
 * ones runs the narrow kernel on the wide tiles, reading no more rows). */
static void filter_item(void *ctx, int64_t item, int tid)
{
    const filter_call *fc = ctx;
    const geometry *g = &fc->g;
    const int64_t mb = item % fc->nmb, rest = item / fc->nmb;
    const int64_t pb = rest % fc->nblocks, rest2 = rest / fc->nblocks;
    const int64_t chunk = rest2 % fc->nchunks, grp = rest2 / fc->nchunks;
    const int64_t p0 = pb * fc->ncp, p1 = min64(p0 + fc->ncp, fc->panels);
    int tr; /* the tile's rows; rs: the row pointers kept per segment (the _segs kernels
             * read a tile's own rows only where the kernels have exact_rows) */
    gemm_micro_for(fc->t, (int)min64(MG_GEMM_NR, g->cog - p0 * MG_GEMM_NR), &tr);
    const int rs_max = fc->t->mr > fc->t->mr_narrow ? fc->t->mr : fc->t->mr_narrow;
    const int rs = fc->t->exact_rows ? tr : rs_max; /* <= the driver's */
    const int64_t tiles = ceil_div(fc->cols, tr);
    const int64_t t0 = tiles * mb / fc->nmb, t1 = tiles * (mb + 1) / fc->nmb;
    const int64_t rc0 = chunk * fc->chunk_rows, rc1 = min64(g->n * g->oh, rc0 + fc->chunk_rows);
    const int64_t panel_floats = fc->block_pixels * MG_GEMM_NR, ks = g->sw * g->c;
    float *bp = fc->scratch + (int64_t)tid * fc->ncp * panel_floats;
    const float **ptrs = fc->ptrs + (int64_t)tid * fc->thread_ptrs;
    int64_t *lens = fc->lens + (int64_t)tid * fc->thread_lens;
    float *c = (chunk ? fc->part + (chunk - 1) * fc->cols * g->co : fc->df) + grp * g->cog;
    for (int64_t r0 = rc0; r0 < rc1 && t0 < t1; r0 += fc->block_rows) {
        const int64_t r1 = min64(rc1, r0 + fc->block_rows), pixels = (r1 - r0) * g->ow;
        const float *b = fc->dy + r0 * g->ow * g->co; /* dy itself: one panel */
        if (!fc->direct_b) {
            for (int64_t p = p0; p < p1; ++p) {
                const float *src = b + grp * g->cog + p * MG_GEMM_NR;
                const int64_t nr = min64(MG_GEMM_NR, g->cog - p * MG_GEMM_NR);
                float *d = bp + (p - p0) * panel_floats;
                for (int64_t k = 0; k < pixels; ++k)
                    copy_floats(d + k * MG_GEMM_NR, src + k * g->co, nr);
            }
            b = bp;
        }
        const int load = r0 > rc0;
        for (int64_t t = t0; t < t1; ++t) {
            const int64_t m0 = t * tr;
            const int valid = (int)min64(tr, fc->cols - m0);
            tile_reach reach;
            tile_taps(fc, grp, m0, valid, rs, &reach);
            const int64_t span = (g->kh - 1) * g->dh, qstep = g->sw * g->c;
            int64_t nseg = 0;
            for (int64_t r = r0; r < r1; ++r) {
                const int64_t img = r / g->oh, y0 = r % g->oh * g->sh - g->pt;
                const int64_t base = ((img * g->h + y0) * g->w - g->pl) * g->c;
                const int rows_in = y0 >= 0 && y0 + span < g->h;
                for (int s = 0; s + 1 < reach.ncuts; ++s, ++nseg) {
                    const int64_t at = base + reach.cuts[s] * qstep; /* pixel cuts[s] */
                    const float **seg = ptrs + nseg * rs;
                    lens[nseg] = reach.cuts[s + 1] - reach.cuts[s];
                    if (rows_in && reach.all_in[s]) {
                        for (int i = 0; i < rs; ++i)
                            seg[i] = fc->x + (at + reach.off[i]);
                        continue;
                    }
                    for (int i = 0; i < rs; ++i) {
                        const int64_t y = y0 + reach.dy[i];
                        seg[i] = reach.in[s][i] && y >= 0 && y < g->h
                                     ? fc->x + (at + reach.off[i]) : fc->zeros;
                    }
                }
            }
            for (int64_t p = p0; p < p1; ++p)
                run_segments(fc->t, (int)min64(MG_GEMM_NR, g->cog - p * MG_GEMM_NR), nseg, rs,
                             lens, reach.ncuts == 2, ptrs, ks, b + (p - p0) * panel_floats,
                             c + m0 * g->co + p * MG_GEMM_NR, g->co, valid, load);
        }
    }
}

typedef struct {
    const geometry *g; /* the input's */
    const float *x;
    float *xp;
    int64_t hp, wp; /* the padded copy's rows and columns */
} pad_call;

/* Rows [lo, hi) (image * hp + row) of the padded copy: x's pixels at (row - pt, column -
 * pl), zero outside x */
static void pad_rows(void *ctx, int64_t lo, int64_t hi)
{
    const pad_call *pc = ctx;
    const geometry *g = pc->g;
    const int64_t x0 = min64(g->pl, pc->wp), x1 = min64(pc->wp, g->pl + g->w);
    for (int64_t r = lo; r < hi; ++r) {
        float *dst = pc->xp + r * pc->wp * g->c;
        const int64_t y = r % pc->hp - g->pt;
        if (y < 0 || y >= g->h || x1 <= x0) {
            memset(dst, 0, (size_t)(pc->wp * g->c) * sizeof(float));
            continue;
        }
        memset(dst, 0, (size_t)(x0 * g->c) * sizeof(float));
        memcpy(dst + x0 * g->c, pc->x + ((r / pc->hp * g->h + y) * g->w + x0 - g->pl) * g->c,
               (size_t)((x1 - x0) * g->c) * sizeof(float));
        memset(dst + x1 * g->c, 0, (size_t)((pc->wp - x1) * g->c) * sizeof(float));
    }
}

/* Output columns [qlo[j], qhi[j]) read x through tap column j (q * sw + j * dw - pl in
 * [0, w)); returns the most segments an output row is cut into (between distinct cuts) */
static int64_t column_reach(const geometry *g, int64_t *qlo, int64_t *qhi)
{
    int64_t max_cuts = 1;
    for (int64_t j = 0; j < g->kw; ++j) {
        const int64_t first = g->pl - j * g->dw; /* q * sw >= first */
        qlo[j] = min64(g->ow, first <= 0 ? 0 : ceil_div(first, g->sw));
        const int64_t last = g->w - 1 + g->pl - j * g->dw; /* q * sw <= last */
        qhi[j] = last < 0 ? 0 : min64(g->ow, last / g->sw + 1);
        max_cuts += (qlo[j] > 0) + (qhi[j] < g->ow);
    }
    return max_cuts;
}

typedef struct {
    float *df;
    const float *part;
    int64_t nchunks, size;
} reduce_call;

/* df += the chunks' partial sums, in chunk order, elements [lo, hi) */
static void reduce_rows(void *ctx, int64_t lo, int64_t hi)
{
    const reduce_call *rc = ctx;
    for (int64_t chunk = 1; chunk < rc->nchunks; ++chunk) {
        const float *src = rc->part + (chunk - 1) * rc->size;
        for (int64_t e = lo; e < hi; ++e)
            rc->df[e] += src[e];
    }
}

int64_t mg_conv2d_gemm_filter_chunks(int64_t n, int64_t out_h, int64_t out_w, int64_t groups,
                                     int64_t kh, int64_t kw, int64_t c, int64_t co)
{
    if (n <= 0 || out_h <= 0 || out_w <= 0 || groups <= 0 || kh <= 0 || kw <= 0 || c <= 0 ||
        co <= 0 || c % groups || co % groups)
        return 1;
    const int64_t rows = n * out_h, df_size = kh * kw * (c / groups) * co;
    const int64_t want = ceil_div(FILTER_ITEMS, groups * ceil_div(co / groups, MG_GEMM_NR));
    const int64_t most = max64(1, min64(rows * out_w / CHUNK_MIN, PARTS_MAX / df_size + 1));
    return ceil_div(rows, ceil_div(rows, min64(want, most))); /* no range left empty */
}

int mg_conv2d_gemm_backprop_filter(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                                   int64_t kw, int64_t co, int64_t groups, int64_t stride_h,
                                   int64_t stride_w, int64_t dilation_h, int64_t dilation_w,
                                   int64_t pad_top, int64_t pad_left, int64_t out_h,
                                   int64_t out_w, const float *x, const float *dy, float *df,
                                   int num_threads)
{
    const geometry g = {n, h, w, c, kh, kw, co, groups, stride_h, stride_w, dilation_h,
                        dilation_w, pad_top, pad_left, out_h, out_w, groups ? c / groups : 0,
                        groups ? co / groups : 0};
    if (geometry_check(&g) != MG_OK)
        return MG_EINVAL;
    const int64_t cols = kh * kw * g.cig, df_size = cols * co, pixels = n * out_h * out_w;
    if (!df_size)
        return MG_OK;
    if (!df || (n * h * w * c != 0 && !x) || (pixels * co != 0 && !dy))
        return MG_EINVAL;
    if (!pixels) {
        memset(df, 0, (size_t)df_size * sizeof(float));
        return MG_OK;
    }
    const gemm_kernel_table *t = kernels();
    const int64_t panels = ceil_div(g.cog, MG_GEMM_NR), rows = n * out_h;
    const int64_t nchunks = mg_conv2d_gemm_filter_chunks(n, out_h, out_w, groups, kh, kw, c, co);
    const int64_t chunk_rows = ceil_div(rows, nchunks);
    const int64_t block_rows = min64(chunk_rows, max64(1, FILTER_KC / out_w));
    const int nt = mg_work_threads(num_threads, (double)pixels * (double)df_size);
    /* blocks of up to FILTER_NCP panels (a tile's pointers serve them all), and blocks of C
     * row tiles where the (group, chunk, panels) items would not give every thread 2 (each
     * block packs its B again) */
    const int64_t nblocks = ceil_div(panels, FILTER_NCP), ncp = ceil_div(panels, nblocks);
    const int64_t units = groups * nblocks * nchunks;
    const int64_t nmb = max64(1, min64(ceil_div(cols, t->mr), ceil_div(2 * nt, units)));
    const int rs = t->mr > t->mr_narrow ? t->mr : t->mr_narrow; /* the tallest tile */
    int64_t *q = malloc((size_t)(2 * kw) * sizeof(int64_t));
    if (!q)
        return MG_ENOMEM;
    int64_t *qlo = q, *qhi = q + kw, max_cuts = column_reach(&g, qlo, qhi);
    /* x in place, or (where a row's segments would cost more in pointers than the copy:
     * SEGMENT_COST) a zero-padded copy of the rows and columns the windows read, one
     * segment per output row */
    const int64_t hp = (out_h - 1) * stride_h + (kh - 1) * dilation_h + 1;
    const int64_t wp = (out_w - 1) * stride_w + (kw - 1) * dilation_w + 1;
    const int64_t vectors = ceil_div(min64(g.cog, ncp * MG_GEMM_NR), 16);
    const int padded = max_cuts > 1 && max_cuts * SEGMENT_COST > out_w * vectors;
    geometry gx = g;
    if (padded) {
        gx.h = hp, gx.w = wp, gx.pt = gx.pl = 0;
        max_cuts = column_reach(&gx, qlo, qhi);
    }
    float *xp = padded ? mg_alloc_floats(n * hp * wp * c) : NULL;
    const int64_t zeros_len = (out_w - 1) * stride_w * c + 1; /* a segment's rows in zeros */
    filter_call fc = {t, gx, padded ? xp : x, dy, NULL, df, NULL, qlo, qhi, cols, panels,
                      block_rows, chunk_rows, nchunks, ncp, nblocks, nmb, block_rows * out_w,
                      max_cuts,
                      co == MG_GEMM_NR && groups == 1, NULL, NULL, NULL, 0, 0};
    float *zeros = mg_alloc_floats(zeros_len);
    fc.zeros = zeros;
    fc.part = nchunks > 1 ? mg_alloc_floats((nchunks - 1) * df_size) : NULL;
    fc.scratch = fc.direct_b ? NULL : mg_alloc_floats(nt * ncp * fc.block_pixels * MG_GEMM_NR);
    fc.thread_ptrs = line_items(block_rows * max_cuts * rs, sizeof(float *));
    fc.thread_lens = line_items(block_rows * max_cuts, sizeof(int64_t));
    fc.ptrs = alloc_lines(nt * fc.thread_ptrs * (int64_t)sizeof(float *));
    fc.lens = alloc_lines(nt * fc.thread_lens * (int64_t)sizeof(int64_t));
    int code = MG_ENOMEM;
    if (zeros && (xp || !padded) && (fc.part || nchunks == 1) &&
        (fc.scratch || fc.direct_b) && fc.ptrs && fc.lens) {
        memset(zeros, 0, (size_t)zeros_len * sizeof(float));
        if (padded) {
            pad_call pc = {&g, x, xp, hp, wp};
            mg_pool_rows(mg_stream_threads(nt, n * hp * wp * c), n * hp, 1, pad_rows, &pc);
        }
        mg_pool_run(nt, units * nmb, filter_item, &fc);
        if (nchunks > 1) {
            reduce_call rc = {df, fc.part, nchunks, df_size};
            mg_pool_rows(mg_stream_threads(nt, df_size * nchunks), df_size, 16, reduce_rows,
                         &rc);
        }
        code = MG_OK;
    }
    free(q);
    free(xp);
    free(zeros);
    free(fc.part);
    free(fc.scratch);
    free(fc.lens);
    free(fc.ptrs);
    return code;
}

/* minigraph native 3-D convolution and its gradients on the GEMM micro-kernels: see
 * conv3d_gemm.h.
 *
 * One implicit-GEMM driver (igemm) serves the forward and every stride phase of the input
 * gradient. Its rows are a grid of voxels (img, u) whose A row starts at source voxel
 * start + u * step (x for the forward, dy for a phase); K is a list of taps (source voxel
 * offsets) times `chan` channels, cut into K blocks of at most KC floats (cut_k): a block of
 * one tap's channels, or of taps adjacent in the source (one run, read in place: a filter
 * row of a dilation-1 forward), or of several short taps gathered into the thread's scratch.
 * Per K block each row points at its run in the source, at a zero row (all the block's taps
 * outside it) or at its gathered copy (zeros for the taps outside). Items of the worker pool
 * are (block of MB rows, block of panels of N); an item walks K in order, writing its tile
 * in place (forward) or into a per-thread block then scattered to the phase's voxels (a
 * phase's voxels are not evenly spaced in dx).
 *
 * The filter gradient is df = im2col(x)^T * dy with M = df's rows (tap, c), N = co and K =
 * the output voxels: per block of KC voxels an item (voxel range, block of MB rows of df,
 * block of panels) gathers its rows' im2col block [voxel][row] (the micro-kernel reads A
 * transposed through it: row i at block + i, a step of k MB floats further); dy is packed
 * into panels once, before the items. Voxel ranges (mg_conv3d_gemm_filter_chunks) write their own partial
 * sums, added in range order by a last pass.
 */
#include "conv3d_gemm.h"

#include <stdlib.h>
#include <string.h>

#include "gemm_internal.h"

enum { MB = 96, KC = 256, NCP_MAX = 8, RUN_MIN = 64, FILTER_ITEMS = 16, CHUNK_MIN = 2048 };

static const float zero_row[KC]; /* the A row of a K block outside the source */

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static int shape_check(const mg_conv3d_shape *s)
{
    if (!s || s->n < 0 || s->c < 0 || s->co < 0)
        return MG_EINVAL;
    for (int d = 0; d < 3; ++d)
        if (s->in[d] < 0 || s->k[d] < 0 || s->out[d] < 0 || s->stride[d] < 1 ||
            s->dilation[d] < 1 || s->pad[d] < 0)
            return MG_EINVAL;
    return MG_OK;
}

static int64_t volume(const int64_t v[3]) { return v[0] * v[1] * v[2]; }

/* Blocks of up to NCP_MAX panels, fewer while the items would not give every thread about 4
 * (no result depends on it). */
static int64_t panels_per_block(int64_t panels, int64_t other_items, int nt)
{
    int64_t ncp = min64(panels, NCP_MAX);
    while (ncp > 1 && other_items * ceil_div(panels, ncp) < 4 * (int64_t)nt)
        --ncp;
    return max64(ncp, 1);
}

/* ------------------------------------------------------------------------------------------ */
/* Taps, sources and K blocks                                                                  */

typedef struct {
    int64_t off[3]; /* the tap's source voxel, relative to a row's origin voxel */
} tap3;

typedef struct {
    const float *data; /* [n][ext0][ext1][ext2][cs] */
    int64_t ext[3], cs;
} source;

static int64_t voxel_offset(const source *s, const int64_t v[3])
{
    return ((v[0] * s->ext[1] + v[1]) * s->ext[2] + v[2]) * s->cs;
}

typedef struct {
    int64_t tap;      /* in the tap list */
    int64_t src;      /* floats from the row's origin voxel (channel 0) */
    int64_t dst, len; /* floats [dst, dst + len) of the block */
} piece;

typedef struct {
    int64_t k0, len, first, count; /* K [k0, k0 + len); pieces [first, first + count) */
    int64_t lo[3], hi[3];           /* the extent of its taps' offsets */
    int run;                        /* its pieces are one run of the source */
} kblock;

/* The pieces of K range [k0, k0 + len) (K index tap * chan + channel; a piece per tap) into
 * `pieces`, its extent and run flag into b; returns the pieces' count. */
static int64_t k_range(const tap3 *taps, int64_t chan, const source *s, int64_t k0,
                       int64_t len, kblock *b, piece *pieces)
{
    b->k0 = k0;
    b->len = len;
    b->run = 1;
    for (int d = 0; d < 3; ++d)
        b->lo[d] = INT64_MAX, b->hi[d] = INT64_MIN;
    int64_t count = 0;
    for (int64_t k = k0; k < k0 + len; ++count) {
        const int64_t t = k / chan, ch = k % chan, run = min64(chan - ch, k0 + len - k);
        for (int d = 0; d < 3; ++d) {
            b->lo[d] = min64(b->lo[d], taps[t].off[d]);
            b->hi[d] = max64(b->hi[d], taps[t].off[d]);
        }
        pieces[count] = (piece){t, voxel_offset(s, taps[t].off) + ch, k - k0, run};
        if (count && pieces[count - 1].src + pieces[count - 1].len != pieces[count].src)
            b->run = 0;
        k += run;
    }
    b->count = count;
    return count;
}

/* K (ntaps x chan) cut into blocks of at most KC floats, each within one tap, or whole taps:
 * a run of taps adjacent in the source when it holds RUN_MIN floats or ends the list (read
 * in place), else as many taps as fit (gathered). Returns the blocks' count. */
static int64_t cut_k(const tap3 *taps, int64_t ntaps, int64_t chan, const source *s,
                     kblock *blocks, piece *pieces)
{
    int64_t nb = 0, np = 0;
    for (int64_t k = 0; k < ntaps * chan; ++nb) {
        const int64_t t = k / chan;
        int64_t len;
        if (chan >= KC) {
            len = min64(KC, chan - k % chan);
        } else {
            int64_t r = 1;
            while (t + r < ntaps && (r + 1) * chan <= KC &&
                   voxel_offset(s, taps[t + r].off) == voxel_offset(s, taps[t + r - 1].off) + chan)
                ++r;
            len = (r * chan >= RUN_MIN || t + r == ntaps ? r : min64(KC / chan, ntaps - t)) * chan;
        }
        blocks[nb].first = np;
        np += k_range(taps, chan, s, k, len, &blocks[nb], pieces + np);
        k += len;
    }
    return nb;
}

/* A K block's pieces for a row whose origin voxel is `coord` (offset `origin` in the
 * source) into dst (pieces adjacent in the source in one copy); with `check`, zeros for the
 * taps outside the source. */
static void gather(const source *s, const tap3 *taps, const piece *p, int64_t count,
                   const int64_t coord[3], int64_t origin, int check, float *dst)
{
    for (int64_t i = 0, j; i < count && !check; i = j) {
        int64_t len = p[i].len;
        for (j = i + 1; j < count && p[j].src == p[i].src + len; ++j)
            len += p[j].len;
        memcpy(dst + p[i].dst, s->data + origin + p[i].src, (size_t)len * sizeof(float));
    }
    for (int64_t i = 0; i < count && check; ++i) {
        const int64_t *off = taps[p[i].tap].off;
        int in = 1;
        for (int d = 0; d < 3 && check; ++d)
            in &= coord[d] + off[d] >= 0 && coord[d] + off[d] < s->ext[d];
        if (in)
            memcpy(dst + p[i].dst, s->data + origin + p[i].src, (size_t)p[i].len * sizeof(float));
        else
            memset(dst + p[i].dst, 0, (size_t)p[i].len * sizeof(float));
    }
}

enum { INSIDE, OUTSIDE, CROSSING };

/* Where a row with origin voxel `coord` lies against a K block's taps. */
static int placement(const source *s, const kblock *b, const int64_t coord[3])
{
    int inside = 1;
    for (int d = 0; d < 3; ++d) {
        if (coord[d] + b->hi[d] < 0 || coord[d] + b->lo[d] >= s->ext[d])
            return OUTSIDE;
        inside &= coord[d] + b->lo[d] >= 0 && coord[d] + b->hi[d] < s->ext[d];
    }
    return inside ? INSIDE : CROSSING;
}

/* The filter's taps in row-major order, each at its offset a * dilation (malloc'd; NULL when
 * out of memory). */
static tap3 *filter_taps(const mg_conv3d_shape *s)
{
    const int64_t ntaps = volume(s->k);
    tap3 *taps = malloc((size_t)max64(ntaps, 1) * sizeof(tap3));
    for (int64_t t = 0; taps && t < ntaps; ++t) {
        const int64_t a[3] = {t / (s->k[1] * s->k[2]), t / s->k[2] % s->k[1], t % s->k[2]};
        for (int d = 0; d < 3; ++d)
            taps[t].off[d] = a[d] * s->dilation[d];
    }
    return taps;
}

/* A grid walker: voxel u of a grid, row-major, with its image. */
typedef struct {
    int64_t img, u[3];
} grid_pos;

static grid_pos grid_at(const int64_t grid[3], int64_t m)
{
    const int64_t per = volume(grid), within = m % per;
    return (grid_pos){m / per, {within / (grid[1] * grid[2]), within / grid[2] % grid[1],
                                within % grid[2]}};
}

static void grid_next(const int64_t grid[3], grid_pos *p)
{
    for (int d = 2; d >= 0; --d) {
        if (++p->u[d] < grid[d])
            return;
        p->u[d] = 0;
    }
    ++p->img;
}

/* ------------------------------------------------------------------------------------------ */
/* The implicit GEMM (forward, input gradient phases)                                          */

typedef struct {
    const gemm_kernel_table *t;
    source src;
    int64_t grid[3], start[3], step[3], m; /* rows: n x grid; origin start + u * step */
    float *dst;
    int64_t dext[3], dstart[3], dstep[3], ncols; /* row -> dst voxel dstart + u * dstep */
    int direct;                                  /* rows are dst's voxels in order */
    const tap3 *taps;
    const kblock *blocks;
    const piece *pieces;
    int64_t nkb;
    const float *bp; /* B packed: [panel][k][MG_GEMM_NR] */
    int64_t k, np, ncp, nblocks;
    float *scratch; /* per thread: C block MB x ncp panels, gather rows MB x KC */
} igemm;

static void igemm_item(void *ctx, int64_t item, int tid)
{
    const igemm *g = ctx;
    const int64_t m0 = item / g->nblocks * MB, p0 = item % g->nblocks * g->ncp;
    const int64_t p1 = min64(p0 + g->ncp, g->np), rows = min64(MB, g->m - m0);
    const int64_t width = min64(p1 * MG_GEMM_NR, g->ncols) - p0 * MG_GEMM_NR;
    float *cb = g->scratch + (int64_t)tid * (MB * g->ncp * MG_GEMM_NR + MB * KC);
    float *gathered = cb + MB * g->ncp * MG_GEMM_NR;
    int64_t coord[MB][3], origin[MB], dsto[MB];
    const int64_t src_img = volume(g->src.ext) * g->src.cs, dst_img = volume(g->dext);
    grid_pos pos = grid_at(g->grid, m0);
    for (int64_t r = 0; r < rows; ++r, grid_next(g->grid, &pos)) {
        int64_t dv[3];
        for (int d = 0; d < 3; ++d) {
            coord[r][d] = g->start[d] + pos.u[d] * g->step[d];
            dv[d] = g->dstart[d] + pos.u[d] * g->dstep[d];
        }
        origin[r] = pos.img * src_img + voxel_offset(&g->src, coord[r]);
        dsto[r] = (pos.img * dst_img + (dv[0] * g->dext[1] + dv[1]) * g->dext[2] + dv[2]) *
                  g->ncols;
    }
    /* the tile: in place, or in the thread's block */
    float *c = g->direct ? g->dst + m0 * g->ncols + p0 * MG_GEMM_NR : cb;
    const int64_t ldc = g->direct ? g->ncols : g->ncp * MG_GEMM_NR;
    const float *ptrs[MB + GEMM_MR_MAX];
    for (int64_t b = 0; b < g->nkb; ++b) {
        const kblock *kb = &g->blocks[b];
        for (int64_t r = 0; r < rows; ++r) {
            const int where = placement(&g->src, kb, coord[r]);
            if (where == OUTSIDE) {
                ptrs[r] = zero_row;
            } else if (where == INSIDE && kb->run) {
                ptrs[r] = g->src.data + origin[r] + g->pieces[kb->first].src;
            } else {
                gather(&g->src, g->taps, g->pieces + kb->first, kb->count, coord[r], origin[r],
                       where == CROSSING, gathered + r * KC);
                ptrs[r] = gathered + r * KC;
            }
        }
        for (int r = 0; r < GEMM_MR_MAX; ++r)
            ptrs[rows + r] = ptrs[rows - 1];
        for (int64_t p = p0; p < p1; ++p) {
            const int nr = (int)min64(MG_GEMM_NR, g->ncols - p * MG_GEMM_NR);
            int mr;
            const gemm_micro_fn micro = gemm_micro_for(g->t, nr, &mr);
            const float *bpp = g->bp + (p * g->k + kb->k0) * MG_GEMM_NR;
            for (int64_t r = 0; r < rows; r += mr)
                micro(kb->len, ptrs + r, 1, bpp, c + r * ldc + (p - p0) * MG_GEMM_NR, ldc,
                      (int)min64(rows - r, mr), nr, b > 0);
        }
    }
    if (!g->nkb) /* no term: zeros */
        for (int64_t r = 0; r < rows; ++r)
            memset(c + r * ldc, 0, (size_t)width * sizeof(float));
    if (!g->direct)
        for (int64_t r = 0; r < rows; ++r)
            memcpy(g->dst + dsto[r] + p0 * MG_GEMM_NR, cb + r * ldc, (size_t)width * sizeof(float));
}

/* Runs g (its source, rows, destination and packed B set) over `ntaps` taps of `chan`
 * channels on nt threads. */
static int igemm_run(igemm *g, int64_t ntaps, int64_t chan, int nt)
{
    const int64_t most = ntaps * (chan / KC + 1);
    kblock *blocks = malloc((size_t)max64(most, 1) * sizeof(kblock));
    piece *pieces = malloc((size_t)max64(most, 1) * sizeof(piece));
    g->t = gemm_kernels();
    g->k = ntaps * chan;
    g->np = ceil_div(g->ncols, MG_GEMM_NR);
    const int64_t mblocks = ceil_div(g->m, MB);
    g->ncp = panels_per_block(g->np, mblocks, nt);
    g->nblocks = ceil_div(g->np, g->ncp);
    g->scratch = mg_alloc_floats((int64_t)nt * (MB * g->ncp * MG_GEMM_NR + MB * KC));
    int code = MG_ENOMEM;
    if (blocks && pieces && g->scratch) {
        g->nkb = cut_k(g->taps, ntaps, chan, &g->src, blocks, pieces);
        g->blocks = blocks;
        g->pieces = pieces;
        mg_pool_run(nt, mblocks * g->nblocks, igemm_item, g);
        code = MG_OK;
    }
    free(blocks);
    free(pieces);
    free(g->scratch);
    return code;
}

int mg_conv3d_gemm_forward(const mg_conv3d_shape *s, const float *x, const float *packed_f,
                           float *y, int num_threads)
{
    if (shape_check(s) != MG_OK)
        return MG_EINVAL;
    const int64_t ntaps = volume(s->k), m = s->n * volume(s->out);
    if (!m || !s->co)
        return MG_OK;
    if (!y || (ntaps * s->c != 0 && (!x || !packed_f)))
        return MG_EINVAL;
    if (ntaps * s->c == 0) { /* an empty sum */
        memset(y, 0, (size_t)(m * s->co) * sizeof(float));
        return MG_OK;
    }
    tap3 *taps = filter_taps(s);
    if (!taps)
        return MG_ENOMEM;
    igemm g = {.src = {x, {s->in[0], s->in[1], s->in[2]}, s->c}, .m = m, .dst = y,
               .ncols = s->co, .direct = 1, .taps = taps, .bp = packed_f};
    for (int d = 0; d < 3; ++d) {
        g.grid[d] = g.dext[d] = s->out[d];
        g.start[d] = -s->pad[d];
        g.step[d] = s->stride[d];
        g.dstep[d] = 1;
    }
    const int nt = mg_work_threads(num_threads, (double)m * (double)s->co * (double)(ntaps * s->c));
    const int code = igemm_run(&g, ntaps, s->c, nt);
    free(taps);
    return code;
}

/* ------------------------------------------------------------------------------------------ */
/* Input gradient                                                                              */

/* The taps of phase `ph` along one dim: a with (ph + pad - a * dilation) a multiple of the
 * stride, reading dy at u + delta; a ascending (descending when `descending`). Returns
 * their count. */
static int64_t phase_taps(const mg_conv3d_shape *s, int d, int64_t ph, int descending,
                          int64_t *a_out, int64_t *delta)
{
    int64_t count = 0;
    for (int64_t i = 0; i < s->k[d]; ++i) {
        const int64_t a = descending ? s->k[d] - 1 - i : i;
        const int64_t r = ph + s->pad[d] - a * s->dilation[d];
        if (r % s->stride[d] == 0) {
            a_out[count] = a;
            delta[count++] = r / s->stride[d];
        }
    }
    return count;
}

int mg_conv3d_gemm_backprop_input(const mg_conv3d_shape *s, const float *f, const float *dy,
                                  float *dx, int num_threads)
{
    if (shape_check(s) != MG_OK)
        return MG_EINVAL;
    const int64_t dx_size = s->n * volume(s->in) * s->c, ntaps = volume(s->k);
    if (!dx_size)
        return MG_OK;
    if (!dx || (ntaps * s->c * s->co != 0 && !f) ||
        (s->n * volume(s->out) * s->co != 0 && !dy))
        return MG_EINVAL;
    if (ntaps * s->co * volume(s->out) == 0) { /* no term: zeros */
        memset(dx, 0, (size_t)dx_size * sizeof(float));
        return MG_OK;
    }
    const int64_t np = ceil_div(s->c, MG_GEMM_NR), kmax = max64(max64(s->k[0], s->k[1]), s->k[2]);
    const int nt = mg_work_threads(num_threads, (double)dx_size * (double)(ntaps * s->co) /
                                                    (double)volume(s->stride));
    tap3 *taps = malloc((size_t)ntaps * sizeof(tap3));
    int64_t *lists = malloc((size_t)(6 * kmax) * sizeof(int64_t)); /* per dim: a, delta */
    float *packed = mg_alloc_floats(np * ntaps * s->co * MG_GEMM_NR);
    int code = taps && lists && packed ? MG_OK : MG_ENOMEM;
    int64_t phases[3];
    for (int d = 0; d < 3; ++d)
        phases[d] = min64(s->stride[d], s->in[d]);
    for (int64_t ph = 0; code == MG_OK && ph < volume(phases); ++ph) {
        const int64_t pv[3] = {ph / (phases[1] * phases[2]), ph / phases[2] % phases[1],
                               ph % phases[2]};
        int64_t count[3], *a[3], *delta[3];
        for (int d = 0; d < 3; ++d) {
            a[d] = lists + 2 * d * kmax;
            delta[d] = a[d] + kmax;
            count[d] = phase_taps(s, d, pv[d], d == 2, a[d], delta[d]);
        }
        const int64_t nph = volume(count); /* the phase's taps, row-major over the dims */
        for (int64_t t = 0; t < nph; ++t) {
            const int64_t i[3] = {t / (count[1] * count[2]), t / count[2] % count[1],
                                  t % count[2]};
            for (int d = 0; d < 3; ++d)
                taps[t].off[d] = delta[d][i[d]];
            /* B: packed[p][t * co + o][jj] = f[tap][32 p + jj][o], zero past c */
            const int64_t tap = (a[0][i[0]] * s->k[1] + a[1][i[1]]) * s->k[2] + a[2][i[2]];
            for (int64_t p = 0; p < np; ++p) {
                float *dst = packed + (p * nph * s->co + t * s->co) * MG_GEMM_NR;
                const int64_t w = min64(MG_GEMM_NR, s->c - p * MG_GEMM_NR);
                for (int64_t o = 0; o < s->co; ++o, dst += MG_GEMM_NR) {
                    const float *src = f + (tap * s->c + p * MG_GEMM_NR) * s->co + o;
                    for (int64_t jj = 0; jj < w; ++jj)
                        dst[jj] = src[jj * s->co];
                    memset(dst + w, 0, (size_t)(MG_GEMM_NR - w) * sizeof(float));
                }
            }
        }
        igemm g = {.src = {dy, {s->out[0], s->out[1], s->out[2]}, s->co}, .dst = dx,
                   .ncols = s->c, .taps = taps, .bp = packed, .m = s->n, .direct = 1};
        for (int d = 0; d < 3; ++d) {
            g.grid[d] = ceil_div(s->in[d] - pv[d], s->stride[d]);
            g.m *= g.grid[d];
            g.step[d] = 1;
            g.dext[d] = s->in[d];
            g.dstart[d] = pv[d];
            g.dstep[d] = s->stride[d];
            g.direct &= s->stride[d] == 1;
        }
        code = igemm_run(&g, nph, s->co, nt);
    }
    free(taps);
    free(lists);
    free(packed);
    return code;
}

/* ------------------------------------------------------------------------------------------ */
/* Filter gradient                                                                             */

int64_t mg_conv3d_gemm_filter_chunks(const mg_conv3d_shape *s)
{
    if (!s)
        return 1;
    const int64_t pixels = s->n * volume(s->out), rows = volume(s->k) * s->c;
    if (pixels <= 0 || rows <= 0 || s->co <= 0)
        return 1;
    const int64_t base = ceil_div(rows, MB) * ceil_div(s->co, MG_GEMM_NR);
    const int64_t want = ceil_div(FILTER_ITEMS, base), most = max64(1, pixels / CHUNK_MIN);
    return ceil_div(pixels, ceil_div(pixels, min64(want, most))); /* no range left empty */
}

typedef struct {
    const gemm_kernel_table *t;
    const mg_conv3d_shape *s;
    source src; /* x */
    const tap3 *taps;
    const float *dy;
    float *out; /* [chunk][rows][co]: partial sums, or df itself with one chunk */
    float *df;
    int64_t rows, pixels, chunk, nchunks, mblocks, np, ncp, nblocks;
    float *packed_dy; /* B: [panel][voxel][MG_GEMM_NR], zero past co */
    float *scratch;   /* per thread: the A block, KC x MB */
} filter_call;

/* dy's voxels [lo, hi) into its panels */
static void pack_dy_rows(void *ctx, int64_t lo, int64_t hi)
{
    const filter_call *fc = ctx;
    const int64_t co = fc->s->co;
    for (int64_t p = 0; p < fc->np; ++p) {
        const int64_t w = min64(MG_GEMM_NR, co - p * MG_GEMM_NR);
        float *dst = fc->packed_dy + (p * fc->pixels + lo) * MG_GEMM_NR;
        for (int64_t k = lo; k < hi; ++k, dst += MG_GEMM_NR) {
            memcpy(dst, fc->dy + k * co + p * MG_GEMM_NR, (size_t)w * sizeof(float));
            memset(dst + w, 0, (size_t)(MG_GEMM_NR - w) * sizeof(float));
        }
    }
}

static void filter_item(void *ctx, int64_t item, int tid)
{
    const filter_call *fc = ctx;
    const mg_conv3d_shape *s = fc->s;
    const int64_t pb = item % fc->nblocks, rest = item / fc->nblocks;
    const int64_t mb = rest % fc->mblocks, chunk = rest / fc->mblocks;
    const int64_t p0 = pb * fc->ncp, p1 = min64(p0 + fc->ncp, fc->np);
    const int64_t m0 = mb * MB, mrows = min64(MB, fc->rows - m0);
    const int64_t kb = chunk * fc->chunk, ke = min64(fc->pixels, kb + fc->chunk);
    float *ab = fc->scratch + (int64_t)tid * KC * MB;
    float *out = fc->out + (chunk * fc->rows + m0) * s->co;
    piece pieces[MB];
    kblock blk;
    k_range(fc->taps, s->c, &fc->src, m0, mrows, &blk, pieces);
    const int64_t x_img = volume(s->in) * s->c;
    grid_pos pos = grid_at(s->out, kb);
    for (int64_t k0 = kb; k0 < ke; k0 += KC) {
        const int64_t kc = min64(KC, ke - k0);
        for (int64_t k = 0; k < kc; ++k, grid_next(s->out, &pos)) { /* A: im2col [k][row] */
            int64_t coord[3];
            for (int d = 0; d < 3; ++d)
                coord[d] = pos.u[d] * s->stride[d] - s->pad[d];
            const int where = placement(&fc->src, &blk, coord);
            if (where == OUTSIDE)
                memset(ab + k * mrows, 0, (size_t)mrows * sizeof(float));
            else
                gather(&fc->src, fc->taps, pieces, blk.count, coord,
                       pos.img * x_img + voxel_offset(&fc->src, coord), where == CROSSING,
                       ab + k * mrows);
        }
        for (int64_t p = p0; p < p1; ++p) {
            const int nr = (int)min64(MG_GEMM_NR, s->co - p * MG_GEMM_NR);
            int mr;
            const gemm_micro_fn micro = gemm_micro_for(fc->t, nr, &mr);
            for (int64_t r = 0; r < mrows; r += mr) {
                const int valid = (int)min64(mr, mrows - r);
                const float *rows[GEMM_MR_MAX];
                for (int i = 0; i < mr; ++i)
                    rows[i] = ab + r + (i < valid ? i : valid - 1);
                micro(kc, rows, mrows, fc->packed_dy + (p * fc->pixels + k0) * MG_GEMM_NR,
                      out + r * s->co + p * MG_GEMM_NR, s->co, valid, nr, k0 > kb);
            }
        }
    }
}

/* df's rows [lo, hi): the chunks' partial sums added in chunk order */
static void reduce_rows(void *ctx, int64_t lo, int64_t hi)
{
    const filter_call *fc = ctx;
    const int64_t size = fc->rows * fc->s->co;
    for (int64_t i = lo * fc->s->co; i < hi * fc->s->co; ++i) {
        float sum = fc->out[i];
        for (int64_t chunk = 1; chunk < fc->nchunks; ++chunk)
            sum += fc->out[chunk * size + i];
        fc->df[i] = sum;
    }
}

int mg_conv3d_gemm_backprop_filter(const mg_conv3d_shape *s, const float *x, const float *dy,
                                   float *df, int num_threads)
{
    if (shape_check(s) != MG_OK)
        return MG_EINVAL;
    const int64_t ntaps = volume(s->k), rows = ntaps * s->c, pixels = s->n * volume(s->out);
    const int64_t df_size = rows * s->co;
    if (!df_size)
        return MG_OK;
    if (!df || (s->n * volume(s->in) * s->c != 0 && !x) ||
        (pixels * s->co != 0 && !dy))
        return MG_EINVAL;
    if (!pixels) {
        memset(df, 0, (size_t)df_size * sizeof(float));
        return MG_OK;
    }
    tap3 *taps = filter_taps(s);
    if (!taps)
        return MG_ENOMEM;
    const int64_t nchunks = mg_conv3d_gemm_filter_chunks(s), np = ceil_div(s->co, MG_GEMM_NR);
    const int nt = mg_work_threads(num_threads, (double)pixels * (double)df_size);
    filter_call fc = {gemm_kernels(), s, {x, {s->in[0], s->in[1], s->in[2]}, s->c}, taps, dy,
                      NULL, df, rows, pixels, ceil_div(pixels, nchunks), nchunks,
                      ceil_div(rows, MB), np, 0, 0, NULL, NULL};
    fc.ncp = panels_per_block(np, nchunks * fc.mblocks, nt);
    fc.nblocks = ceil_div(np, fc.ncp);
    float *part = nchunks > 1 ? mg_alloc_floats(nchunks * df_size) : NULL;
    fc.out = nchunks > 1 ? part : df;
    fc.scratch = mg_alloc_floats((int64_t)nt * KC * MB);
    fc.packed_dy = mg_alloc_floats(np * pixels * MG_GEMM_NR);
    int code = MG_ENOMEM;
    if (fc.out && fc.scratch && fc.packed_dy) {
        mg_pool_rows(mg_stream_threads(nt, pixels * np * MG_GEMM_NR), pixels, 1, pack_dy_rows,
                     &fc);
        mg_pool_run(nt, nchunks * fc.mblocks * fc.nblocks, filter_item, &fc);
        if (nchunks > 1)
            mg_pool_rows(mg_stream_threads(nt, df_size * nchunks), rows, 1, reduce_rows, &fc);
        code = MG_OK;
    }
    free(part);
    free(fc.packed_dy);
    free(fc.scratch);
    free(taps);
    return code;
}

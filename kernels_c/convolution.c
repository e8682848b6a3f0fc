/* minigraph native 2-D convolutions (float32, dilation 1; strides in the forward): the drivers.
 *
 * How a call runs
 * ---------------
 * Forward and input gradient are one engine: a strided cross-correlation of a source
 * tensor (x, or dy for the input gradient) with a packed filter. The input gradient is the
 * correlation of dy, padded by (kh - 1 - pad_top, kw - 1 - pad_left), with the filter
 * flipped in H and W and its in/out channels swapped (stride 1). Two jobs of the worker pool
 * (mg_pool_run, mg_runtime.h):
 *   1. pack the filter as [kh * kw * c][cop] (cop = co rounded up to 16, zero tail; skipped,
 *      with no job, when the forward filter already is that);
 *   2. work items of output rows (a band: a whole image while there are enough images to
 *      share out, fewer rows otherwise, and half images for a shorter tail at several
 *      threads; several whole images when they are small, under SMALL_PLANE output
 *      pixels). An item's thread cuts its pixels into rectangles whose windows cross the
 *      source's edges alike (the interior, the top rows, the left columns, the corners,
 *      ...; one rectangle across the item's images) and each rectangle into the fewest
 *      tiles of up to 10 (12, 8, 6) pixels x blocks of up to 64 output channels, of widths
 *      that differ by at most one; each tile is one micro-kernel call that keeps its
 *      outputs in registers over the taps that read inside the source (the zero padding's
 *      are skipped: 0 * w adds nothing to a sum that starts at +0) and applies a fused
 *      epilogue to them there, when given. NHWC: the tiles read the source and write the
 *      output (no copy). NCHW: the item's images are transposed whole into a zero-padded
 *      NHWC scratch, and the tiles write an NHWC buffer after them that is transposed into
 *      the output while in cache.
 * The filter gradient sums x[pixel + tap] * dy[pixel] over all pixels: tiles of filter rows
 * (of one tap, 8 or more input channels: reading x itself, NHWC, at only the pixels where
 * the tap lies inside the input; of one tap row, fewer channels: reading a zero-padded NHWC
 * copy of x made image by image in a first job; NCHW x and dy transposed in that job; tiles
 * of any height up to what the registers hold, so nothing is computed in vain) x channel
 * blocks; a work item is a run of tiles over one group of consecutive output rows (one
 * group, unless the tiles are few: then a number of groups fixed by the shape, summed apart
 * and added in order at the end), walked in chunks of whole images (~512 output pixels,
 * what they read within L2), calling its tiles' micro-kernels (which carry the sums in
 * registers through a chunk). Work items go to threads dynamically (the machine may be
 * shared); each output element is summed in an order fixed by the shape, so results do not
 * depend on the thread count or schedule.
 *
 * The micro-kernels are per ISA, one table each (conv_kernel_table), picked once per call
 * (mg_isa_pick): convolution_template.h instantiated for AVX2 + FMA and the baseline
 * (convolution_isa_avx2.c, convolution_isa_scalar.c), hand-written AVX-512 intrinsics
 * (convolution_isa_avx512.c). NCHW tensors are transposed in 16 x 16 blocks (in registers
 * with AVX-512).
 */
#include "convolution.h"

#include <stdlib.h>
#include <string.h>

#include "mg_runtime.h"
#include "convolution_internal.h"


/* ------------------------------------------------------------------------------------------ */
/* Instruction set: the micro-kernels of the ISA in use, picked once per call                 */

static const conv_kernel_table *conv_kernels(void)
{
    static const void *const tables[MG_NISA] =
        MG_ISA_TABLES(&conv_kernels_scalar, &conv_kernels_avx2, &conv_kernels_avx512);
    return mg_isa_pick(tables);
}

/* A phase is `count` independent items; run_phases runs the phases in order, each a job of
 * the worker pool (mg_pool_run: items handed to threads one at a time, so a thread that
 * starts late, on a shared machine, takes fewer). Which thread runs an item never changes a
 * result. */
typedef struct {
    int64_t count;
    mg_pool_fn fn;
} phase;

static void run_phases(void *ctx, const phase *phases, int nphases, int nt)
{
    for (int p = 0; p < nphases; ++p)
        mg_pool_run(nt, phases[p].count, phases[p].fn, ctx);
}

static int64_t round16(int64_t v) { return (v + 15) & ~(int64_t)15; }

/* ------------------------------------------------------------------------------------------ */
/* Padding and transposes                                                                      */

typedef struct {
    const float *src; /* [n][h][w][c] or [n][c][h][w] */
    int64_t h, w, c;
    int64_t pt, pl, hp, wp; /* pads; padded extent (rows/columns past h+pt / w+pl are zero,
                               rows/columns of the source past hp / wp are dropped) */
    int channels_last;
    nn_transpose_fn transpose;
} pad_geo;

/* NCHW image -> its zero-padded NHWC copy, in 16 x 16 blocks (when the padded extent holds
 * the whole image, always so for SAME / VALID) */
static void pad_image_nchw(const pad_geo *g, int64_t img, float *dst)
{
    const int64_t c = g->c, w = g->w, plane = g->h * w;
    const float *src = g->src + img * c * plane;
    memset(dst, 0, (size_t)(g->hp * g->wp * c) * sizeof(float));
    const float *rows[16];
    float *cols[16];
    for (int64_t p0 = 0; p0 < plane; p0 += 16) {
        const int np = (int)(plane - p0 < 16 ? plane - p0 : 16);
        for (int j = 0; j < np; ++j) {
            const int64_t p = p0 + j;
            cols[j] = dst + ((p / w + g->pt) * g->wp + p % w + g->pl) * c;
        }
        for (int64_t c0 = 0; c0 < c; c0 += 16) {
            const int nc = (int)(c - c0 < 16 ? c - c0 : 16);
            for (int r = 0; r < nc; ++r)
                rows[r] = src + (c0 + r) * plane + p0;
            float *out[16];
            for (int j = 0; j < np; ++j)
                out[j] = cols[j] + c0;
            g->transpose(rows, nc, np, out);
        }
    }
}

/* Columns [c0, c1) of rows [r0, r1) of image img's zero-padded NHWC copy into dst, a band
 * of whole padded rows whose row 0 is padded row `base` */
static void pad_rows(const pad_geo *g, int64_t img, int64_t base, int64_t r0, int64_t r1,
                     int64_t c0, int64_t c1, float *dst)
{
    const int64_t c = g->c, rowlen = g->wp * c;
    /* the padded columns holding source columns: [first, last) */
    const int64_t first = g->pl > c0 ? (g->pl < c1 ? g->pl : c1) : c0;
    const int64_t last = g->pl + g->w < c1 ? (g->pl + g->w > first ? g->pl + g->w : first) : c1;
    for (int64_t r = r0; r < r1; ++r) {
        float *row = dst + (r - base) * rowlen;
        const int64_t hh = r - g->pt;
        if (hh < 0 || hh >= g->h) {
            memset(row + c0 * c, 0, (size_t)((c1 - c0) * c) * sizeof(float));
            continue;
        }
        memset(row + c0 * c, 0, (size_t)((first - c0) * c) * sizeof(float));
        memset(row + last * c, 0, (size_t)((c1 - last) * c) * sizeof(float));
        float *out = row + first * c;
        const int64_t ncols = last - first, x0 = first - g->pl;
        if (ncols <= 0)
            continue;
        if (g->channels_last) {
            memcpy(out, g->src + ((img * g->h + hh) * g->w + x0) * c,
                   (size_t)(ncols * c) * sizeof(float));
        } else {
            const float *plane = g->src + img * c * g->h * g->w + hh * g->w + x0;
            for (int64_t ci = 0; ci < c; ++ci) {
                const float *s = plane + ci * g->h * g->w;
                for (int64_t x = 0; x < ncols; ++x)
                    out[x * c + ci] = s[x];
            }
        }
    }
}

/* Image img's whole zero-padded NHWC copy */
static void pad_image(const pad_geo *g, int64_t img, float *dst)
{
    if (!g->channels_last && g->h + g->pt <= g->hp && g->w + g->pl <= g->wp)
        pad_image_nchw(g, img, dst);
    else
        pad_rows(g, img, 0, 0, g->hp, 0, g->wp, dst);
}

/* d[ch][p] = s[p][ch] for p < plane (NHWC -> NCHW, one image), or the reverse. */
static void transpose_plane(nn_transpose_fn transpose, const float *s, float *d, int64_t plane,
                            int64_t ch, int to_channels_first)
{
    const float *rows[16];
    float *out[16];
    for (int64_t p0 = 0; p0 < plane; p0 += 16)
        for (int64_t c0 = 0; c0 < ch; c0 += 16) {
            const int np = (int)(plane - p0 < 16 ? plane - p0 : 16);
            const int nc = (int)(ch - c0 < 16 ? ch - c0 : 16);
            if (to_channels_first) {
                for (int r = 0; r < np; ++r)
                    rows[r] = s + (p0 + r) * ch + c0;
                for (int j = 0; j < nc; ++j)
                    out[j] = d + (c0 + j) * plane + p0;
                transpose(rows, np, nc, out);
            } else {
                for (int r = 0; r < nc; ++r)
                    rows[r] = s + (c0 + r) * plane + p0;
                for (int j = 0; j < np; ++j)
                    out[j] = d + (p0 + j) * ch + c0;
                transpose(rows, nc, np, out);
            }
        }
}

/* ------------------------------------------------------------------------------------------ */
/* Forward / input-gradient engine                                                             */

typedef struct {
    const conv_kernel_table *tab;
    pad_geo pad;
    int64_t n, c, kh, kw, oh, ow, co, cop;
    int64_t sh, sw;     /* strides (the input gradient's engine: 1) */
    const float *f;     /* caller's filter */
    int flip;           /* 0: f is HWIO [kh][kw][c][co]; 1: f is the forward filter
                           [kh][kw][co][c] of the input gradient (flip and swap) */
    float *fp;          /* packed filter (== f when usable as is) */
    float *out;
    int channels_last;
    int64_t nblk;            /* blocks of (up to) 64 output channels */
    int64_t band, nbands;    /* output rows per work item; items per image */
    int64_t imgs;            /* images per work item (> 1: whole small images, band = oh) */
    int64_t scratch_floats;  /* per thread: the item's padded source (+ NCHW: its result) */
    float *scratch;          /* one per thread */
    const mg_epilogue *ep;   /* applied by the tiles (NHWC), or NULL */
} fwd_ctx;

/* Channel blocks: all but the last are full (4 vectors). */
static int64_t block_nvec(int64_t co, int64_t b)
{
    const int64_t nvec_all = (co + 15) / 16;
    return nvec_all - 4 * b < 4 ? nvec_all - 4 * b : 4;
}

/* Packed filter rows [lo, hi), row m = (i * kw + j) * c + ci: the caller's row m, or (flip)
 * column ci of tap (kh - 1 - i, kw - 1 - j)'s [co][c] block, transposed 16 x 16 at a time */
static void pack_rows(fwd_ctx *k, int64_t lo, int64_t hi)
{
    const int64_t c = k->c, co = k->co, cop = k->cop, kh = k->kh, kw = k->kw;
    for (int64_t m = lo, count; m < hi; m += count) {
        const int64_t ci = m % c, ij = m / c, i = ij / kw, j = ij % kw;
        /* rows of one tap and 16-channel block */
        count = 16 - ci % 16 < c - ci ? 16 - ci % 16 : c - ci;
        count = count < hi - m ? count : hi - m;
        if (!k->flip) {
            for (int64_t r = 0; r < count; ++r)
                memcpy(k->fp + (m + r) * cop, k->f + (m + r) * co, (size_t)co * sizeof(float));
        } else {
            const float *src = k->f + ((kh - 1 - i) * kw + (kw - 1 - j)) * co * c + ci;
            const float *rows[16];
            float *dst[16];
            for (int64_t o0 = 0; o0 < co; o0 += 16) {
                const int no = (int)(co - o0 < 16 ? co - o0 : 16);
                for (int r = 0; r < no; ++r)
                    rows[r] = src + (o0 + r) * c;
                for (int r = 0; r < (int)count; ++r)
                    dst[r] = k->fp + (m + r) * cop + o0;
                k->tab->transpose(rows, no, (int)count, dst);
            }
        }
        for (int64_t r = 0; r < count; ++r)
            memset(k->fp + (m + r) * cop + co, 0, (size_t)(cop - co) * sizeof(float));
    }
}

/* Channel block b's vectors, filter and channels in its tiles */
static void block_init(const fwd_ctx *k, int64_t b, nn_fwd_tile *t)
{
    const int nvec = (int)block_nvec(k->co, b);
    t->nvec = nvec;
    t->last_lanes = (b + 1) * 64 >= k->co ? (int)(k->co - b * 64 - (nvec - 1) * 16) : 16;
    t->f = k->fp + b * 64;
    t->ch0 = b * 64;
}

/* The micro-kernel for tiles of `pixels` pixels of t's vectors: of exactly that width, or
 * else the next wider one the table has (its width in *width). */
static nn_fwd_fn tile_kernel(const conv_kernel_table *tab, const nn_fwd_tile *t, int pixels,
                             int *width)
{
    const int nvec = t->nvec, half = t->last_lanes <= 8, widest = tab->fwd_pixels[nvec];
    for (int w = pixels; w < widest; ++w) {
        const nn_fwd_fn fn = half && tab->fwd_narrow_half[nvec][w] ? tab->fwd_narrow_half[nvec][w]
                                                                    : tab->fwd_narrow[nvec][w];
        if (fn) {
            *width = w;
            return fn;
        }
    }
    *width = widest;
    return half && tab->fwd_half[nvec] ? tab->fwd_half[nvec] : tab->fwd[nvec];
}

/* Where an item's tiles read: the source image itself (NHWC), or its zero-padded NHWC copy
 * in the thread's scratch (NCHW). Tap (i, j) of output pixel (y, x) is at row y * sh + i -
 * row0, column x * sw + j - col0 of an image (row_stride floats a row, img_stride floats an
 * image, c floats a pixel). */
typedef struct {
    const float *x;
    int64_t row_stride, img_stride, row0, col0;
} tile_source;

/* Fills tiles with output pixels and runs each when full: a tile may take pixels of several
 * rows, and of several images of a work item (xbase, ybase: the image's first source float
 * and first output float, relative to the tile's x and y). A run of `count` pixels is cut
 * into the fewest tiles the widest kernel allows, of widths differing by at most one:
 * `wide_left` tiles of P pixels, then tiles of P - 1 (each pixel's sums are the same
 * whatever tile it falls in). The run's pixels share their taps inside the source: tap rows
 * [i0, i0 + t->kh), tap columns [j0, j0 + t->K / c). */
typedef struct {
    const fwd_ctx *k;
    nn_fwd_tile *t;
    nn_fwd_fn fn;
    int P, width, np; /* pixels per tile; fn's width (>= P); pixels in the tile */
    int64_t wide_left;
    const tile_source *src;
    int64_t y0, i0, j0;
    int64_t xbase, ybase;
} tile_filler;

static void set_width(tile_filler *f, int P)
{
    f->P = P;
    f->fn = tile_kernel(f->k->tab, f->t, P, &f->width);
}

/* Runs the tile (its missing pixels, up to the kernel's width, repeat its last one: read,
 * never stored). */
static void run_tile(tile_filler *f)
{
    nn_fwd_tile *t = f->t;
    t->npix = f->np;
    for (int p = f->np; p < f->width; ++p)
        t->off[p] = t->off[f->np - 1], t->yoff[p] = t->yoff[f->np - 1];
    f->fn(t);
    f->np = 0;
    if (--f->wide_left == 0 && f->P > 1)
        set_width(f, f->P - 1);
}

/* Adds output pixels [x0, x1) of row yy to the tile, running it whenever it is full. */
static void add_pixels(tile_filler *f, int64_t yy, int64_t x0, int64_t x1)
{
    const tile_source *s = f->src;
    const int64_t c = f->k->c, ps = s->row_stride / c;
    nn_fwd_tile *t = f->t;
    int64_t off = f->xbase + ((yy * f->k->sh - s->row0 + f->i0) * ps + x0 * f->k->sw - s->col0 +
                              f->j0) * c;
    int64_t yoff = f->ybase + ((yy - f->y0) * f->k->ow + x0) * f->k->co;
    const int64_t step = f->k->sw * c;
    for (int64_t x = x0; x < x1; ++x, off += step, yoff += f->k->co) {
        t->off[f->np] = off;
        t->yoff[f->np] = yoff;
        if (++f->np == f->P)
            run_tile(f);
    }
}

/* The taps of output coordinate o (rows: pad = pt, stride sh, kernel kh, source extent h)
 * that read inside the source: [*lo, *hi) (empty: lo == hi). */
static void valid_taps(int64_t o, int64_t stride, int64_t pad, int64_t kernel, int64_t extent,
                       int64_t *lo, int64_t *hi)
{
    const int64_t first = o * stride - pad; /* source coordinate of tap 0 */
    *lo = first < 0 ? (-first < kernel ? -first : kernel) : 0;
    *hi = extent - first < kernel ? (extent - first > *lo ? extent - first : *lo) : kernel;
}

/* The end of the run of coordinates from o (below `end`) whose valid taps are those of o */
static int64_t same_taps_end(int64_t o, int64_t end, int64_t stride, int64_t pad,
                             int64_t kernel, int64_t extent)
{
    int64_t lo, hi, l, h;
    valid_taps(o, stride, pad, kernel, extent, &lo, &hi);
    int64_t e = o + 1;
    while (e < end && (valid_taps(e, stride, pad, kernel, extent, &l, &h), l == lo && h == hi))
        ++e;
    return e;
}

/* The tiles of output rows [ya, yb) x columns [xa, xb) of the item's nimg images (rows
 * relative to the band's f->y0), whose pixels all read tap rows [i0, i1) and tap columns
 * [j0, j1) inside the source (the others read the zero padding and are skipped: adding
 * 0 * w changes no sum, which starts at +0 and so is never -0): cut into tiles, run. */
static void rect_tiles(tile_filler *f, int64_t ya, int64_t yb, int64_t xa, int64_t xb,
                       int64_t nimg, int64_t img_out)
{
    const fwd_ctx *k = f->k;
    nn_fwd_tile *t = f->t;
    int64_t i0, i1, j0, j1;
    valid_taps(ya, k->sh, k->pad.pt, k->kh, k->pad.h, &i0, &i1);
    valid_taps(xa, k->sw, k->pad.pl, k->kw, k->pad.w, &j0, &j1);
    const int widest = k->tab->fwd_pixels[t->nvec];
    const int64_t count = nimg * (yb - ya) * (xb - xa), tiles = (count + widest - 1) / widest;
    if (!tiles)
        return;
    const int64_t wide = (count + tiles - 1) / tiles;
    f->wide_left = count - tiles * (wide - 1);
    set_width(f, (int)wide);
    const float *f0 = t->f;
    f->i0 = i0, f->j0 = j0;
    t->kh = i1 - i0;
    t->K = (j1 - j0) * k->c;
    t->f = f0 + (i0 * k->kw + j0) * k->c * k->cop;
    f->xbase = f->ybase = 0;
    for (int64_t i = 0; i < nimg; ++i, f->xbase += f->src->img_stride, f->ybase += img_out)
        for (int64_t yy = ya; yy < yb; ++yy)
            add_pixels(f, yy, xa, xb);
    if (f->np)
        run_tile(f);
    t->f = f0;
}

/* Work item `item`'s images, first output row, rows and images */
static void item_rows(const fwd_ctx *k, int64_t item, int64_t *img, int64_t *y0,
                      int64_t *rows, int64_t *nimg)
{
    *img = item / k->nbands * k->imgs, *y0 = item % k->nbands * k->band;
    *rows = k->oh - *y0 < k->band ? k->oh - *y0 : k->band;
    *nimg = k->n - *img < k->imgs ? k->n - *img : k->imgs;
}

/* Work item: output rows [y0, y0 + band) of one image, or (imgs > 1) `imgs` whole images.
 * The item's pixels are cut into rectangles of pixels whose windows cross the source's
 * edges alike (top rows, left columns, the interior, ...; one rectangle across the item's
 * images), each into tiles that run only the taps inside the source. NHWC: the tiles read
 * the source itself and write the output (no copy). NCHW: each image is transposed whole
 * into the scratch (zero-padded NHWC) and the tiles write an NHWC buffer after the padded
 * images, transposed into the output at the end (an NCHW item holds whole images). */
static void fwd_band_item(void *ctx, int64_t item, int tid)
{
    fwd_ctx *k = ctx;
    int64_t img, y0, rows, nimg;
    item_rows(k, item, &img, &y0, &rows, &nimg);
    const int64_t plane = k->oh * k->ow, c = k->c, wp = k->pad.wp;
    const int64_t img_floats = k->pad.hp * wp * c;
    float *xp = k->scratch + (int64_t)tid * k->scratch_floats;
    if (!k->channels_last)
        for (int64_t i = 0; i < nimg; ++i)
            pad_image(&k->pad, img + i, xp + i * img_floats);
    const tile_source src =
        k->channels_last ? (tile_source){k->pad.src + img * k->pad.h * k->pad.w * c,
                                         k->pad.w * c, k->pad.h * k->pad.w * c, k->pad.pt,
                                         k->pad.pl}
                         : (tile_source){xp, wp * c, img_floats, 0, 0};
    float *y = k->channels_last ? k->out + (img * plane + y0 * k->ow) * k->co
                                : xp + k->imgs * img_floats;
    /* source geometry as the valid taps see it: NCHW reads the padded copy, whose taps
     * past the source are zeros too, so the same rectangles hold */
    nn_fwd_tile t;
    t.x = src.x;
    t.row_stride = src.row_stride;
    t.frs = k->kw * c * k->cop;
    t.cop = k->cop;
    t.ep = k->ep;
    t.res = NULL;
    for (int64_t b = 0; b < k->nblk; ++b) {
        block_init(k, b, &t);
        t.y = y + b * 64;
        if (k->ep && k->ep->residual)
            t.res = k->ep->residual + (t.y - k->out);
        tile_filler f = {.k = k, .t = &t, .src = &src, .y0 = y0};
        for (int64_t ya = y0, yb; ya < y0 + rows; ya = yb) {
            yb = same_taps_end(ya, y0 + rows, k->sh, k->pad.pt, k->kh, k->pad.h);
            for (int64_t xa = 0, xb; xa < k->ow; xa = xb) {
                xb = same_taps_end(xa, k->ow, k->sw, k->pad.pl, k->kw, k->pad.w);
                rect_tiles(&f, ya, yb, xa, xb, nimg, plane * k->co);
            }
        }
    }
    if (!k->channels_last)
        for (int64_t i = 0; i < nimg; ++i)
            transpose_plane(k->tab->transpose, y + i * plane * k->co,
                            k->out + (img + i) * plane * k->co, plane, k->co, 1);
}

enum {
    PACK_ROWS = 256,
    ITEMS_PER_THREAD = 4,
    BAND_ITEMS = 32,
    BAND_BYTES = 256 << 10,
    SMALL_PLANE = 256,
    GROUP_PIXELS = 256
};

static void fwd_pack_item(void *ctx, int64_t item, int tid)
{
    (void)tid;
    fwd_ctx *k = ctx;
    const int64_t rows = k->kh * k->kw * k->c, lo = item * PACK_ROWS;
    pack_rows(k, lo, lo + PACK_ROWS < rows ? lo + PACK_ROWS : rows);
}

/* Images per work item: one, except for images of fewer than SMALL_PLANE output pixels,
 * which go GROUP_PIXELS' worth at a time (an item's rectangles of border pixels, one
 * across its images, are short: with one 8 x 8 image per item, 12-pixel tiles were 11 %
 * empty before tiles of every width), while that leaves ITEMS_PER_THREAD items per thread
 * and the images (padded) fit BAND_BYTES. */
static int64_t item_images(const fwd_ctx *k, int nt)
{
    const int64_t plane = k->oh * k->ow;
    if (plane >= SMALL_PLANE)
        return 1;
    int64_t imgs = (GROUP_PIXELS + plane - 1) / plane;
    const int64_t img_bytes = k->pad.hp * k->pad.wp * k->c * (int64_t)sizeof(float);
    while (imgs > 1 && ((k->n + imgs - 1) / imgs < (int64_t)nt * ITEMS_PER_THREAD ||
                        imgs * img_bytes > BAND_BYTES))
        --imgs;
    return imgs;
}

/* Output rows per work item: whole images while there are enough of them to share out
 * (ITEMS_PER_THREAD each), else fewer rows (more items), and never more than read
 * BAND_BYTES of (padded) rows; NCHW or several images per item: whole images. With several threads,
 * also halved while that leaves bands of SMALL_PLANE pixels or more, up to BAND_ITEMS per
 * thread: the last items of a call are what one thread still runs while the other waits
 * (32 images of 32 x 32 at 2 threads: 64 half images, not 32 images). */
static int64_t band_rows(const fwd_ctx *k, int nt)
{
    int64_t band = k->oh;
    if (!k->channels_last || k->imgs > 1)
        return band;
    const int64_t row_bytes = k->pad.wp * k->c * (int64_t)sizeof(float);
    for (;;) {
        const int64_t items = k->n * ((k->oh + band - 1) / band), half = (band + 1) / 2;
        const int few = items < (int64_t)nt * ITEMS_PER_THREAD ||
                        (nt > 1 && items < (int64_t)nt * BAND_ITEMS &&
                         half * k->ow >= SMALL_PLANE);
        if (band <= 1 || !(few || ((band - 1) * k->sh + k->kh) * row_bytes > BAND_BYTES))
            return band;
        band = half;
    }
}

static int conv_engine(const float *src, int64_t n, int64_t h, int64_t w, int64_t c,
                       int64_t kh, int64_t kw, int64_t co, int64_t sh, int64_t sw, int64_t pt,
                       int64_t pl, int64_t oh, int64_t ow, int channels_last, const float *f,
                       int flip, float *out, const mg_epilogue *ep, int num_threads)
{
    if (n < 0 || h < 0 || w < 0 || c <= 0 || kh <= 0 || kw <= 0 || co <= 0 || sh <= 0 ||
        sw <= 0 || pt < 0 || pl < 0 || oh < 0 || ow < 0 || !src || !f || !out ||
        (ep && (!channels_last || mg_epilogue_check(ep) != MG_OK)))
        return MG_EINVAL;
    if (n * oh * ow == 0)
        return 0;
    fwd_ctx k;
    memset(&k, 0, sizeof k);
    k.tab = conv_kernels();
    k.n = n, k.c = c, k.kh = kh, k.kw = kw, k.oh = oh, k.ow = ow, k.co = co, k.sh = sh,
    k.sw = sw;
    k.cop = round16(co);
    k.f = f, k.flip = flip, k.out = out, k.channels_last = channels_last, k.ep = ep;
    k.pad = (pad_geo){src, h, w, c, pt, pl, (oh - 1) * sh + kh, (ow - 1) * sw + kw,
                      channels_last, k.tab->transpose};
    k.nblk = (co + 63) / 64;
    const double work = (double)n * oh * ow * kh * kw * c * k.cop;
    const int nt = mg_work_threads(num_threads, work);
    k.imgs = item_images(&k, nt);
    k.band = band_rows(&k, nt);
    k.nbands = (oh + k.band - 1) / k.band;
    /* NCHW: the item's zero-padded NHWC images and their NHWC result (NHWC: none) */
    k.scratch_floats = channels_last ? 0 : k.imgs * (k.pad.hp * k.pad.wp * c + oh * ow * co);
    int err = 0;
    k.fp = (!flip && k.cop == co) ? (float *)f : mg_alloc_floats(kh * kw * c * k.cop);
    k.scratch = mg_alloc_floats((int64_t)nt * k.scratch_floats);
    if (!k.fp || !k.scratch) {
        err = MG_ENOMEM;
    } else {
        const int64_t rows = kh * kw * c;
        const phase phases[2] = {
            {k.fp != f ? (rows + PACK_ROWS - 1) / PACK_ROWS : 0, fwd_pack_item},
            {(n + k.imgs - 1) / k.imgs * k.nbands, fwd_band_item}};
        run_phases(&k, phases, 2, nt);
    }
    if (k.fp != f)
        free(k.fp);
    free(k.scratch);
    return err;
}

int mg_conv2d_forward(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh, int64_t kw,
                      int64_t co, int64_t stride_h, int64_t stride_w, int64_t pad_top,
                      int64_t pad_left, int64_t out_h, int64_t out_w, int channels_last,
                      const float *x, const float *f, float *y, const mg_epilogue *epilogue,
                      int num_threads)
{
    return conv_engine(x, n, h, w, c, kh, kw, co, stride_h, stride_w, pad_top, pad_left, out_h,
                       out_w, channels_last, f, 0, y, epilogue, num_threads);
}

int mg_conv2d_backprop_input(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                             int64_t kw, int64_t co, int64_t pad_top, int64_t pad_left,
                             int64_t out_h, int64_t out_w, int channels_last, const float *f,
                             const float *dy, float *dx, int num_threads)
{
    if (pad_top < 0 || pad_top >= kh || pad_left < 0 || pad_left >= kw)
        return MG_EINVAL;
    /* correlate dy [n, out_h, out_w, co] (padded by kh-1-pad_top, kw-1-pad_left) with the
       flipped, channel-swapped filter: output [n, h, w, c] */
    return conv_engine(dy, n, out_h, out_w, co, kh, kw, c, 1, 1, kh - 1 - pad_top,
                       kw - 1 - pad_left, h, w, channels_last, f, 1, dx, NULL, num_threads);
}

/* ------------------------------------------------------------------------------------------ */
/* Filter gradient                                                                             */

/* How the filter gradient's sums run (each element one fixed order, whatever the threads):
 * the n * out_h output rows (image by image) are cut into `groups` runs of consecutive rows,
 * a number that depends on the shape only; group g sums x[pixel + tap] * dy[pixel] over its
 * pixels in order (one chain of fused multiply-adds), group 0 into df, the others into
 * partial sums; then df = ((df + partial_1) + partial_2) + ... A pixel whose tap reads the
 * padding adds no term (by taps, below) or adds 0 * dy (by tap rows): for finite dy the
 * same bits (x + 0 is x; a sum that starts at +0 never becomes -0). Few tiles (few input
 * channels or output channels) would give the threads few work items: such shapes take
 * several groups, so a work item is (group, run of tiles).
 *
 * Two ways to cut the filter into tiles, fixed by the shape and ISA:
 *   - by taps (8 or more input channels, and micro-kernels of the heights the cut needs):
 *     each tap's c filter rows are cut into tiles, and a tile reads x itself (NHWC; NCHW
 *     after a transpose into a scratch) at only the pixels where its tap lies inside the
 *     input: no padded copy, and no multiply by the padding's zeros (an 8 x 8 image under a
 *     3 x 3 filter: 16 % fewer multiply-adds);
 *   - by tap rows (fewer channels: a tap's rows would make tiles too short to keep the
 *     multiply-add pipes busy): each tap row's kw * c filter rows are cut into tiles that
 *     read a zero-padded NHWC copy of x, made image by image in a first job. */
typedef struct {
    const conv_kernel_table *tab;
    pad_geo pad;        /* the prep job's copy of x: zero-padded (by tap rows), or NHWC */
    int64_t n, h, w, c, kh, kw, oh, ow, co, K, pt, pl;
    int by_taps;
    int64_t pieces, span; /* pieces a tap row is cut into (kw by taps, else 1), rows each */
    const float *dy_src;
    const float *x;     /* what the tiles read: x itself (NHWC by taps) or the scratch xp */
    float *xp, *dyb, *df;
    int64_t x_row, x_img; /* floats per row and per image of what the tiles read */
    float *partial;     /* groups - 1 partial sums of df's size (group g at (g - 1) * dfsize) */
    int64_t dfsize;
    int64_t groups;     /* runs of output rows, summed apart */
    int64_t chunk_rows; /* output rows per micro-kernel call (whole images) */
    int64_t nblk;
    /* per block kind (a full channel block, the last one): a piece's `tiles` tiles, the
       first `tall` of `rows` filter rows, the rest of rows - 1, and their micro-kernels */
    nn_bwf_fn fn[2][2];
    int64_t tiles[2], rows[2], tall[2];
    int nvec[2], lanes[2];     /* their vectors, valid lanes of the last vector */
    int64_t units;      /* tiles of all blocks and tap rows */
    int64_t item_units; /* tiles per work item */
    int64_t group_items; /* work items per group */
} bwf_ctx;

enum {
    BWF_ITEMS = 8,          /* work items per thread */
    BWF_MIN_UNITS = 96,     /* tiles below which the rows are summed in several groups */
    BWF_MAX_GROUPS = 32,
    BWF_GROUP_PIXELS = 1024, /* the fewest output pixels of a group */
    BWF_SUM_FLOATS = 4096,  /* floats of df per item of the final sum */
    BWF_TAP_CHANNELS = 8,   /* the fewest input channels cut by taps */
    BWF_CHUNK_BYTES = 196608 /* what a chunk's tiles read at most (bwf_chunk_pixels) */
};

/* The micro-kernel of tiles of `rows` filter rows: the one of exactly that height, else the
 * next taller one (which computes rows it throws away); NULL when there is none or `exact`
 * and none has that height. */
static nn_bwf_fn bwf_kernel(const conv_kernel_table *tab, int nvec, int lanes, int64_t rows,
                            int exact)
{
    int64_t r = rows;
    while (r <= tab->bwf_rows[nvec] && !tab->bwf[nvec][r] && !exact)
        ++r;
    if (r > tab->bwf_rows[nvec] || !tab->bwf[nvec][r])
        return NULL;
    const nn_bwf_fn half = lanes <= 8 ? tab->bwf_half[nvec][r] : NULL;
    return half ? half : tab->bwf[nvec][r];
}

/* A piece of `span` filter rows cut into the fewest tiles the tallest tile allows, of
 * heights that differ by one at most (rows, then rows - 1: K = 9, one tile of 9; K = 64 in
 * tiles of 6 at most, nine of 6 and two of 5). Returns 0 where a tile has no micro-kernel
 * (`exact`: none of exactly its height). */
static int bwf_tiling(bwf_ctx *k, int last, int exact)
{
    const int nvec = k->nvec[last], lanes = k->lanes[last];
    const int64_t most = k->tab->bwf_rows[nvec];
    const int64_t tiles = (k->span + most - 1) / most, rows = (k->span + tiles - 1) / tiles;
    k->tiles[last] = tiles, k->rows[last] = rows;
    k->tall[last] = k->span - tiles * (rows - 1);
    k->fn[last][0] = bwf_kernel(k->tab, nvec, lanes, rows, exact);
    k->fn[last][1] = k->tall[last] < tiles ? bwf_kernel(k->tab, nvec, lanes, rows - 1, exact)
                                           : k->fn[last][0];
    return k->fn[last][0] && k->fn[last][1];
}

/* Output rows [*y0, *y1) of an image, or pixels [*x0, *x1) of a row, where tap `tap` of a
 * window padded by `pad` lies inside an input of `size` (out: the output's size) */
static void bwf_inside(int64_t tap, int64_t pad, int64_t size, int64_t out, int64_t *lo,
                       int64_t *hi)
{
    *lo = pad - tap > 0 ? pad - tap : 0;
    *hi = size + pad - tap < out ? size + pad - tap : out;
    if (*hi < *lo)
        *hi = *lo;
}

/* Tiles [lo, hi) (channel block by block, tap row by tap row, piece by piece) over the
 * output rows [y, y + ny) of `nimg` images from image img (ny = out_h when several), sums at
 * dst. Rows (and images) that lie back to back in x and dy are walked as one row. */
static void bwf_units(const bwf_ctx *k, int64_t lo, int64_t hi, nn_bwf_tile *t, int64_t img,
                      int64_t nimg, int64_t y, int64_t ny, float *dst)
{
    for (int64_t b = 0; b < k->nblk; ++b) {
        const int last = b == k->nblk - 1;
        const int64_t tiles = k->tiles[last], rows = k->rows[last], tall = k->tall[last];
        const int64_t per_row = k->pieces * tiles;
        const int64_t first = b * k->kh * k->pieces * k->tiles[0], end = first + k->kh * per_row;
        const int64_t u0 = lo > first ? lo : first, u1 = hi < end ? hi : end;
        if (u0 >= u1)
            continue;
        t->nvec = k->nvec[last];
        t->last_lanes = k->lanes[last];
        /* tile u is tile q of piece j of tap row i; s: its first row in the tap row */
        int64_t i = (u0 - first) / per_row, j = (u0 - first) % per_row / tiles;
        int64_t q = (u0 - first) % tiles;
        for (int64_t u = u0; u < u1; ++u) {
            const int64_t s = j * k->span + q * (rows - 1) + (q < tall ? q : tall);
            int64_t y0 = y, y1 = y + ny, x0 = 0, x1 = k->ow;
            if (k->by_taps) {
                int64_t top, bottom;
                bwf_inside(i, k->pt, k->h, k->oh, &top, &bottom);
                y0 = y0 > top ? y0 : top;
                y1 = y1 < bottom ? y1 : bottom;
                y1 = y1 > y0 ? y1 : y0;
                bwf_inside(j, k->pl, k->w, k->ow, &x0, &x1);
                /* x row y + i - pt, column x + j - pl; the tap's offset j * c is in s */
                t->x = y1 > y0 && x1 > x0 ? k->x + img * k->x_img + (y0 + i - k->pt) * k->x_row +
                                                (x0 - k->pl) * k->c + s
                                          : k->x;
            } else { /* the padded copy: padded row y + i, column x + j */
                t->x = k->x + img * k->x_img + (y0 + i) * k->x_row + s;
            }
            t->nimg = nimg;
            t->ny = y1 - y0;
            t->nx = x1 - x0;
            if (t->nx * k->c == k->x_row && t->nx == k->ow) { /* whole rows of x and dy */
                t->nx *= t->ny;
                if (t->ny == k->oh && t->ny * k->x_row == k->x_img) /* whole images too */
                    t->nx *= t->nimg, t->nimg = 1;
                t->ny = 1;
            }
            t->nrows = (int)(q < tall ? rows : rows - 1);
            t->dy = k->dyb + ((img * k->oh + y0) * k->ow + x0) * k->co + b * 64;
            t->df = dst + (i * k->K + s) * k->co + b * 64;
            if ((t->nx && t->ny && t->nimg) || !t->accumulate) /* else nothing to add */
                k->fn[last][q >= tall](t);
            if (++q == tiles && (q = 0, ++j == k->pieces))
                j = 0, ++i;
        }
    }
}

/* The prep job: image img of x into the scratch (zero-padded by tap rows, NHWC by taps; no
 * job for NHWC by taps), and of dy for NCHW */
static void bwf_prep_item(void *ctx, int64_t img, int tid)
{
    (void)tid;
    bwf_ctx *k = ctx;
    if (k->xp)
        pad_image(&k->pad, img, k->xp + img * k->x_img);
    if (k->dyb != k->dy_src)
        transpose_plane(k->tab->transpose, k->dy_src + img * k->oh * k->ow * k->co,
                        k->dyb + img * k->oh * k->ow * k->co, k->oh * k->ow, k->co, 0);
    if (k->xp && img == k->n - 1)
        memset(k->xp + k->n * k->x_img, 0, NN_SLACK * sizeof(float));
}

/* Work item: a run of tiles over one group's rows, chunk by chunk (whole images when a
 * chunk holds some, else rows of one image), in order. */
static void bwf_tile_item(void *ctx, int64_t item, int tid)
{
    (void)tid;
    bwf_ctx *k = ctx;
    const int64_t g = item / k->group_items, lo = item % k->group_items * k->item_units;
    const int64_t hi = lo + k->item_units < k->units ? lo + k->item_units : k->units;
    const int64_t total = k->n * k->oh, r0 = g * total / k->groups;
    const int64_t r1 = (g + 1) * total / k->groups, oh = k->oh;
    float *dst = g ? k->partial + (g - 1) * k->dfsize : k->df;
    nn_bwf_tile t;
    t.c = k->c;
    t.row_stride = k->x_row;
    t.img_stride = k->x_img;
    t.dy_stride = k->co;
    t.dy_row_stride = k->ow * k->co;
    t.dy_img_stride = oh * k->ow * k->co;
    t.df_stride = k->co;
    for (int64_t r = r0, count; r < r1; r += count) {
        const int64_t img = r / oh, y = r % oh;
        int64_t ny, nimg = 1;
        if (y == 0 && r1 - r >= oh && k->chunk_rows >= oh) {
            const int64_t whole = (r1 - r) / oh, fit = k->chunk_rows / oh;
            nimg = whole < fit ? whole : fit;
            ny = oh;
            count = nimg * oh;
        } else {
            count = oh - y < r1 - r ? oh - y : r1 - r;
            count = count < k->chunk_rows ? count : k->chunk_rows;
            ny = count;
        }
        t.accumulate = r > r0;
        bwf_units(k, lo, hi, &t, img, nimg, y, ny, dst);
    }
}

/* df = df + partial_1 + partial_2 + ..., in that order, over floats [item, item + 1) *
 * BWF_SUM_FLOATS */
static void bwf_sum_item(void *ctx, int64_t item, int tid)
{
    (void)tid;
    bwf_ctx *k = ctx;
    const int64_t lo = item * BWF_SUM_FLOATS;
    const int64_t hi = lo + BWF_SUM_FLOATS < k->dfsize ? lo + BWF_SUM_FLOATS : k->dfsize;
    for (int64_t g = 1; g < k->groups; ++g) {
        const float *p = k->partial + (g - 1) * k->dfsize;
        for (int64_t e = lo; e < hi; ++e)
            k->df[e] += p[e];
    }
}

/* The groups (shape only: never the thread count): one while there are BWF_MIN_UNITS tiles
 * to share out, else enough for that many (group, tile) pairs, each group of at least
 * BWF_GROUP_PIXELS pixels. */
static int64_t bwf_groups(const bwf_ctx *k)
{
    if (k->units >= BWF_MIN_UNITS)
        return 1;
    int64_t g = (BWF_MIN_UNITS + k->units - 1) / k->units;
    const int64_t by_pixels = k->n * k->oh * k->ow / BWF_GROUP_PIXELS;
    g = g < BWF_MAX_GROUPS ? g : BWF_MAX_GROUPS;
    g = g < by_pixels ? g : by_pixels;
    g = g < k->n * k->oh ? g : k->n * k->oh;
    return g > 1 ? g : 1;
}

/* The tiling (by taps where the channels and the ISA's micro-kernels allow, else by tap
 * rows) and what the tiles read */
static void bwf_plan(bwf_ctx *k, const float *x, int channels_last)
{
    const int64_t c = k->c;
    for (int last = 0; last < 2; ++last) {
        k->nvec[last] = (int)(last ? block_nvec(k->co, k->nblk - 1) : 4);
        k->lanes[last] = last ? (int)(k->co - (k->nblk - 1) * 64 - (k->nvec[last] - 1) * 16)
                              : 16;
    }
    k->by_taps = c >= BWF_TAP_CHANNELS;
    k->pieces = k->by_taps ? k->kw : 1;
    k->span = k->by_taps ? c : k->K;
    for (int last = 0; last < 2 && k->by_taps; ++last)
        k->by_taps = bwf_tiling(k, last, 1);
    if (!k->by_taps) {
        k->pieces = 1, k->span = k->K;
        bwf_tiling(k, 0, 0);
        bwf_tiling(k, 1, 0);
    }
    const int64_t hp = k->by_taps ? k->h : k->oh + k->kh - 1;
    const int64_t wp = k->by_taps ? k->w : k->ow + k->kw - 1;
    k->pad = (pad_geo){x, k->h, k->w, c, k->by_taps ? 0 : k->pt, k->by_taps ? 0 : k->pl, hp, wp,
                       channels_last, k->tab->transpose};
    k->x_row = wp * c;
    k->x_img = hp * wp * c;
    k->units = k->kh * k->pieces * ((k->nblk - 1) * k->tiles[0] + k->tiles[1]);
}

int mg_conv2d_backprop_filter(int64_t n, int64_t h, int64_t w, int64_t c, int64_t kh,
                              int64_t kw, int64_t co, int64_t pad_top, int64_t pad_left,
                              int64_t out_h, int64_t out_w, int channels_last,
                              const float *x, const float *dy, float *df, int num_threads)
{
    if (n < 0 || h < 0 || w < 0 || c <= 0 || kh <= 0 || kw <= 0 || co <= 0 || pad_top < 0 ||
        pad_left < 0 || out_h < 0 || out_w < 0 || !x || !dy || !df)
        return MG_EINVAL;
    bwf_ctx k;
    memset(&k, 0, sizeof k);
    k.tab = conv_kernels();
    k.n = n, k.h = h, k.w = w, k.c = c, k.kh = kh, k.kw = kw, k.oh = out_h, k.ow = out_w;
    k.co = co, k.pt = pad_top, k.pl = pad_left;
    k.K = kw * c;
    k.df = df;
    k.dfsize = kh * kw * c * co;
    k.dy_src = dy;
    k.nblk = (co + 63) / 64;
    if (n * out_h * out_w == 0) {
        memset(df, 0, (size_t)k.dfsize * sizeof(float));
        return 0;
    }
    bwf_plan(&k, x, channels_last);
    k.groups = bwf_groups(&k);
    /* output rows per chunk (whole images): a tile call carries its sums through a chunk,
     * loading and storing them once, so (AVX-512) enough images for the table's
     * bwf_chunk_pixels output pixels (an 8 x 8 x 64 layer ran 10 % faster at 8 images a
     * chunk than at one), while x and dy of a 64-channel block stay within BWF_CHUNK_BYTES
     * of L2 (12 x 12 x 96 ran 15 % slower at 8 images a chunk than at 2). Tiles that walk a
     * chunk once per 16 channels (AVX2, baseline) take what fits in L1 (~24 KB: per pixel a
     * 64-byte line of x and 16 channels of dy; 8 x 8 x 64 on AVX2 ran 12 % slower with the
     * L2-sized chunks). */
    const int64_t pixels = out_h * out_w, tab_pixels = k.tab->bwf_chunk_pixels;
    const int64_t wide = tab_pixels ? 64 : 16, budget = tab_pixels ? BWF_CHUNK_BYTES : 24576;
    const int64_t img_bytes = (k.x_img / c * (c < wide ? c : wide) +
                               pixels * (co < 64 ? co : 64)) * 4;
    const int64_t fit = budget / img_bytes > 1 ? budget / img_bytes : 1;
    const int64_t imgs = tab_pixels ? (tab_pixels + pixels - 1) / pixels : fit;
    k.chunk_rows = (imgs < fit ? imgs : fit) * out_h;
    int err = 0;
    const int copy_x = !k.by_taps || !channels_last;
    k.xp = copy_x ? mg_alloc_floats(n * k.x_img + NN_SLACK) : NULL;
    k.x = copy_x ? k.xp : x;
    k.dyb = channels_last ? (float *)dy : mg_alloc_floats(n * out_h * out_w * co);
    k.partial = k.groups > 1 ? mg_alloc_floats((k.groups - 1) * k.dfsize) : NULL;
    if ((copy_x && !k.xp) || !k.dyb || (k.groups > 1 && !k.partial)) {
        err = MG_ENOMEM;
    } else {
        const double work = (double)n * out_h * out_w * kh * kw * c * round16(co);
        const int nt = mg_work_threads(num_threads, work);
        /* (group, run of tiles) items: BWF_ITEMS per thread where there are tiles enough */
        const int64_t want = (BWF_ITEMS * nt + k.groups - 1) / k.groups;
        k.item_units = nt > 1 ? (k.units + want - 1) / want : k.units;
        k.group_items = (k.units + k.item_units - 1) / k.item_units;
        const phase phases[3] = {
            {copy_x ? n : 0, bwf_prep_item},
            {k.groups * k.group_items, bwf_tile_item},
            {k.groups > 1 ? (k.dfsize + BWF_SUM_FLOATS - 1) / BWF_SUM_FLOATS : 0,
             bwf_sum_item}};
        run_phases(&k, phases, 3, nt);
    }
    free(k.xp);
    free(k.partial);
    if (k.dyb != dy)
        free(k.dyb);
    return err;
}

/* Internals of the convolution kernels: the driver (convolution.c) and the per-ISA
 * micro-kernels (convolution_isa_*.c) meet here: the tiles and the table of one ISA.
 *
 * A forward tile is `npix` output pixels (any of them, up to the kernel's `pixels`) times
 * `nvec` vectors of 16 output channels, over kh tap rows of K taps (all its pixels' taps
 * that read inside the source: the zero padding's are skipped). Its pixel p reads NHWC input
 * at `x + off[p]` (its first tap); tap row i adds i * row_stride, and a tap row is K
 * contiguous floats, matched by K rows of the packed filter from f + i * frs (row stride
 * `cop`). It writes pixel p at `y + yoff[p]`.
 *
 * With an epilogue (`ep`, NULL: none), the tile applies its stages (activations.h) to the
 * sums in registers before storing them: the tile's channel j reads the stage vectors at
 * ch0 + j, and its pixel p the residual at res + yoff[p] + j.
 *
 * A filter-gradient tile is `nrows` consecutive filter rows (of one tap row, or of one tap:
 * the rows of its input channels; the kernel's rows at most) times `nvec` vectors of output
 * channels; it sums x[pixel][r] * dy[pixel] over a run of pixels: `nimg` images of `ny` rows
 * of `nx` pixels, x and dy each at its own strides (the run's first pixel at `x`, `dy`),
 * pixel by pixel in that order, adding to what df holds when `accumulate`. It reads the
 * kernel's rows of floats at each pixel: where `nrows` is fewer, the rows past it read the
 * next pixel's (or the scratch's slack past the last) and are computed and thrown away.
 */
#ifndef MINIGRAPH_CONVOLUTION_INTERNAL_H
#define MINIGRAPH_CONVOLUTION_INTERNAL_H

#include <stdint.h>

#include "activations.h"
#include "mg_runtime.h"

#define NN_MAX_TILE 12 /* pixels or rows of the widest tile */
#define NN_SLACK 64    /* zeroed floats after the padded input scratch */
#define NN_BWF_MAX_ROWS 24 /* filter rows of the tallest filter-gradient tile */

typedef struct {
    const float *x;   /* padded input scratch */
    int64_t off[NN_MAX_TILE]; /* per pixel: offset of its top-left tap (floats) */
    int64_t row_stride;       /* floats from one tap row to the next (wp * c) */
    int64_t kh, K;            /* tap rows; taps per row (up to kw * c) */
    const float *f;           /* packed filter rows of its first tap, first channel */
    int64_t cop, frs;         /* floats from one filter row to the next; tap row to the next */
    float *y;          /* output of the tile's first pixel, first channel */
    int64_t yoff[NN_MAX_TILE]; /* per pixel: its output (and residual) at y + yoff[p] */
    int npix, nvec, last_lanes; /* valid pixels; vectors; valid lanes of the last vector */
    const mg_epilogue *ep; /* stages applied before the store, or NULL */
    int64_t ch0;           /* the tile's first output channel */
    const float *res;      /* ep's residual at the tile's first pixel and channel */
} nn_fwd_tile;

typedef struct {
    const float *x;   /* input at the run's first pixel, the tile's first filter row */
    const float *dy;  /* dy at the run's first pixel, the tile's first output channel */
    int64_t nimg, ny, nx;              /* images; rows per image; pixels per row */
    int64_t c, row_stride, img_stride; /* x: floats per pixel, per row, per image */
    int64_t dy_stride, dy_row_stride, dy_img_stride; /* dy: the same */
    float *df;        /* df at the tile's first filter row, first channel */
    int64_t df_stride; /* floats between df rows (co) */
    int nrows, nvec, last_lanes, accumulate;
} nn_bwf_tile;

typedef void (*nn_fwd_fn)(const nn_fwd_tile *t);
typedef void (*nn_bwf_fn)(const nn_bwf_tile *t);
/* A block transpose: dst[j][r] = src[r][j] for r < nsrc, j < lanes (both 1..16); the rows
 * are anywhere (NCHW <-> NHWC layout changes, padded rows). */
typedef void (*nn_transpose_fn)(const float *const *src, int nsrc, int lanes,
                                float *const *dst);

/* One table per ISA; index = nvec (1..4). */
typedef struct {
    int fwd_pixels[5];
    nn_fwd_fn fwd[5];
    nn_fwd_fn fwd_half[5]; /* the same for last_lanes <= 8 (NULL: use fwd) */
    /* [nvec][P]: tiles of exactly P < fwd_pixels[nvec] pixels (NULL: none; fewer pixels
     * then run on the next wider tile), to cut a run of pixels into tiles of nearly equal
     * widths with no slot computed in vain */
    nn_fwd_fn fwd_narrow[5][NN_MAX_TILE];
    nn_fwd_fn fwd_narrow_half[5][NN_MAX_TILE]; /* the same for last_lanes <= 8 (NULL: fwd_narrow) */
    int bwf_rows[5];       /* the most rows of a filter-gradient tile */
    /* [nvec][rows]: tiles of that many rows (NULL: none; bwf[nvec][bwf_rows[nvec]] exists) */
    nn_bwf_fn bwf[5][NN_BWF_MAX_ROWS + 1];
    nn_bwf_fn bwf_half[5][NN_BWF_MAX_ROWS + 1]; /* the same for last_lanes <= 8 (NULL: bwf) */
    /* output pixels a filter-gradient chunk wants, within L2 (0: as many as fit in L1, for
       tiles that walk a chunk once per 16 channels) */
    int bwf_chunk_pixels;
    nn_transpose_fn transpose;
} conv_kernel_table;

/* convolution_template.h (scalar, avx2) and convolution_isa_avx512.c */
extern const conv_kernel_table conv_kernels_scalar;
#if MG_X86
extern const conv_kernel_table conv_kernels_avx2, conv_kernels_avx512;
#endif

#endif

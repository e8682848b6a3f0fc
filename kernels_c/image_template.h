/* The bilinear resize loop, written once and instantiated per ISA by image_isa_<isa>.c (the
 * compiler vectorizes the channel loop for the ISA's target).
 *
 * Needs: MG_ISA_NAME (the ISA's name token: defines image_kernels_<isa>).
 */
#define FN(name) MG_ISA_FN(name)

/* no FMA contraction: each operation rounds to float32 as TF's and numpy's do */
static __attribute__((optimize("fp-contract=off"))) void
FN(bilinear_rows)(const resize_geo *g, int64_t lo, int64_t hi)
{
    const int64_t c = g->c, row_in = g->w * c, row_out = g->ow * c;
    for (int64_t row = lo; row < hi; ++row) {
        const int64_t image = row / g->oh, i = row % g->oh;
        const float *top = g->x + (image * g->h + g->y_lower[i]) * row_in;
        const float *bottom = g->x + (image * g->h + g->y_upper[i]) * row_in;
        const float yl = g->y_lerp[i];
        float *out = g->y + row * row_out;
        for (int64_t j = 0; j < g->ow; ++j) {
            const float *restrict tl = top + g->x_lower[j] * c;
            const float *restrict tr = top + g->x_upper[j] * c;
            const float *restrict bl = bottom + g->x_lower[j] * c;
            const float *restrict br = bottom + g->x_upper[j] * c;
            const float xl = g->x_lerp[j];
            float *restrict o = out + j * c;
            for (int64_t k = 0; k < c; ++k) {
                const float t = tl[k] + (tr[k] - tl[k]) * xl;
                const float b = bl[k] + (br[k] - bl[k]) * xl;
                o[k] = t + (b - t) * yl;
            }
        }
    }
}

const image_kernel_table MG_ISA_FN(image_kernels) = {
    .bilinear = FN(bilinear_rows),
};

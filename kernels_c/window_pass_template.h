/* The window passes' row addition for one ISA (MG_ISA_NAME, window_pass_isa_*.c): one
 * vectorized loop, one rounding per element (no contraction: there is no product). */
static void MG_ISA_FN(add_row)(float *restrict acc, const float *restrict src, int64_t n)
{
    for (int64_t j = 0; j < n; ++j)
        acc[j] += src[j];
}

const window_pass_table MG_ISA_FN(window_pass_kernels) = {MG_ISA_FN(add_row)};

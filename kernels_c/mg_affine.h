/* MG_AFFINE(x, k, b): x * k + b on one float, rounded as the batch-norm kernels of the ISA
 * being compiled round it: one fused multiply-add with FMA (AVX2, AVX-512), a product then a
 * sum without (the baseline). The fused epilogues' affine stage (activations_template.h,
 * convolution_template.h) uses it, so each ISA rounds as its batch norm does.
 *
 * No include guard on purpose: a per-ISA file includes it after its target pragma (each
 * template includes it), where __FMA__ / __AVX512F__ say what that ISA has. */
#undef MG_AFFINE
#if defined(__FMA__) || defined(__AVX512F__)
#define MG_AFFINE(x, k, b) __builtin_fmaf((x), (k), (b))
#else
#define MG_AFFINE(x, k, b) ((x) * (k) + (b))
#endif

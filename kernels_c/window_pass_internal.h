/* Internals of the window passes (window_pass.c): the row addition, compiled per ISA
 * (window_pass_template.h x window_pass_isa_*.c; plain adds, the same result on every ISA)
 * and picked with mg_isa_pick. */
#ifndef MINIGRAPH_WINDOW_PASS_INTERNAL_H
#define MINIGRAPH_WINDOW_PASS_INTERNAL_H

#include <stdint.h>

#include "mg_runtime.h"
#include "window_pass.h"

typedef struct {
    void (*add_row)(float *acc, const float *src, int64_t n); /* acc[j] += src[j], j < n */
} window_pass_table;

extern const window_pass_table window_pass_kernels_scalar;
#if MG_X86
extern const window_pass_table window_pass_kernels_avx2, window_pass_kernels_avx512;
#endif

#endif

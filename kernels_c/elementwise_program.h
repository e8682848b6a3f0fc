/* minigraph native elementwise programs (float32): a group of elementwise ops run as one
 * pass over their operands. Public C API.
 *
 * A program computes registers. Registers 0 .. ninputs - 1 are the inputs; instruction i
 * writes register ninputs + i from registers it names below its own:
 *
 *   MG_EW_UNARY   dst = f(a)        f: an activation of kernels_c/activations_internal.h
 *                                   (mg_elementwise_fn_name(MG_EW_UNARY, fn)), with `alpha`
 *                                   for the scaled ones (LeakyRelu)
 *   MG_EW_GRAD    dst = f(a, b)     f: an activation gradient (a: the incoming gradient,
 *                                   b: the features), both operands whole tensors
 *   MG_EW_ARITH   dst = a OP b      OP: a binary op of kernels_c/broadcast_internal.h; one
 *                                   operand may be a scalar input (one value for all)
 *   MG_EW_MATH    dst = f(a)        f: one of MG_EW_MATH_FUNCTIONS below: IEEE operations
 *                                   rounded once (-x, |x|, x * x, sqrt x, 1 / sqrt x in two
 *                                   roundings, 1 / x) and the error functions as mg_erf and
 *                                   mg_erfc compute them (double precision, rounded once)
 *
 * Every instruction runs the very loop its own op's kernel runs (mg_sigmoid, mg_broadcast,
 * ...), over runs of the same elements; those loops give each element the same bits wherever
 * it sits in a run (no FMA contraction, no reassociation), so each register holds bit for bit
 * what the op alone computes, and the program what the ops compute one after the other.
 *
 * The iteration space is `rows` x `cols` elements. Input i is data[i] laid out as
 * layout[i] says: row r of it starts at data[i] + (r / div) * pitch (rows of `cols` floats,
 * or with `scalar` one float for the whole row). So a C-contiguous tensor is div = 1, pitch = cols; one row for every row
 * (a bias) pitch = 0; one row per sample of an [N, H, W, C] iteration ([N, 1, 1, C], a
 * squeeze-and-excitation scale) div = H * W, pitch = C; one value per row ([N, H, W, 1],
 * a layer norm's mean) scalar, div = 1, pitch = 1; one value for all scalar, pitch = 0.
 * Output k is register out_regs[k] (a computed register, each at most once), written
 * C-contiguously (rows * cols floats) to outputs[k]. The walk goes row by row in blocks of
 * MG_EW_BLOCK columns through every instruction (registers not written out live in a
 * per-thread stack block), so a group's intermediates never reach memory; rows (or, for
 * one row, column blocks) are spread over the worker pool.
 *
 * Return value (mg_runtime.h): MG_OK, or MG_EINVAL (sizes < 0, a NULL buffer, more than
 * MG_EW_MAX_REGS registers, an instruction reading a register at or above its own, an unknown
 * kind or function, a scalar where a whole tensor is needed, an output register that is an
 * input or repeats). `num_threads` <= 1: the calling thread.
 *
 * The region between the CDEF markers is parsed by cffi (kernels_c/build_native.py).
 */
#ifndef MINIGRAPH_ELEMENTWISE_PROGRAM_H
#define MINIGRAPH_ELEMENTWISE_PROGRAM_H

#include <stdint.h>

#include "mg_runtime.h"

/* BEGIN CDEF */
#define MG_EW_MAX_REGS 64
#define MG_EW_BLOCK 128

enum { MG_EW_UNARY = 0, MG_EW_GRAD = 1, MG_EW_ARITH = 2, MG_EW_MATH = 3 };

typedef struct {
    int32_t kind, fn; /* MG_EW_*, the function's index in its list */
    int32_t a, b;     /* operand registers (b: unused by MG_EW_UNARY) */
    float alpha;      /* a scaled activation's parameter */
} mg_ew_instruction;

typedef struct {
    int64_t div;    /* iteration rows per row of the operand (>= 1) */
    int64_t pitch;  /* floats from one row of the operand to the next (>= 0) */
    int32_t scalar; /* nonzero: a row of the operand is one value for all its columns */
} mg_ew_operand;

/* The functions of a kind, by name ("sigmoid", "mul", "relu_grad", ...): their count, and the
 * name of index fn (NULL out of range). */
int mg_elementwise_fn_count(int kind);
const char *mg_elementwise_fn_name(int kind, int fn);

int mg_elementwise_program(int64_t rows, int64_t cols, int ninputs,
                           const mg_ew_operand *layout, const float *const *data, int ncode,
                           const mg_ew_instruction *code, int noutputs,
                           const int32_t *out_regs, float *const *outputs, int num_threads);
/* END CDEF */

#endif

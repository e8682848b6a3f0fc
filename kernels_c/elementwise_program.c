/* minigraph native elementwise programs (float32); see elementwise_program.h.
 *
 * The entry point checks the program, picks the activation and broadcast families' loop
 * tables for this CPU (their own mg_isa_pick), and walks the iteration space: each pool item
 * is a range of rows (or, for a single row, of column blocks); a block of at most MG_EW_BLOCK
 * columns of one row goes through every instruction before the next block, its registers
 * pointing into the inputs, the outputs, or the thread's stack block.
 */
#include "elementwise_program.h"

#include <math.h>

#include "activations_internal.h"
#include "broadcast_internal.h"
#include "mg_runtime.h"

static const act_kernel_table *activation_loops(void)
{
    static const void *const tables[MG_NISA] =
        MG_ISA_TABLES(&act_kernels_scalar, &act_kernels_avx2, &act_kernels_avx512);
    return mg_isa_pick(tables);
}

static const bc_kernel_table *arithmetic_loops(void)
{
    static const void *const tables[MG_NISA] =
        MG_ISA_TABLES(&bc_kernels_scalar, &bc_kernels_avx2, &bc_kernels_avx512);
    return mg_isa_pick(tables);
}

/* THE LIST of MG_EW_MATH functions: X(name, expression of float x), each the exact value
 * rounded once to float (rsqrt: 1 / sqrt x as two float operations, as the float32 kernels
 * compute it; erf, erfc: the C library's double functions, as mg_erf/mg_erfc) */
#define MG_EW_MATH_FUNCTIONS(X)                                                             \
    X(neg, -x)                                                                              \
    X(abs, __builtin_fabsf(x))                                                              \
    X(square, x * x)                                                                        \
    X(sqrt, __builtin_sqrtf(x))                                                             \
    X(rsqrt, 1.0f / __builtin_sqrtf(x))                                                     \
    X(reciprocal, 1.0f / x)                                                                 \
    X(erf, (float)erf((double)x))                                                           \
    X(erfc, (float)erfc((double)x))

#define EW_MATH_LOOP(name, expr)                                                            \
    static void math_##name(const float *restrict xs, float *restrict ys, int64_t n)      \
    {                                                                                       \
        for (int64_t i = 0; i < n; ++i) {                                                   \
            const float x = xs[i];                                                          \
            ys[i] = (expr);                                                                 \
        }                                                                                   \
    }
MG_EW_MATH_FUNCTIONS(EW_MATH_LOOP)
#undef EW_MATH_LOOP

typedef void (*ew_math_fn)(const float *x, float *y, int64_t n);
#define EW_MATH_ENTRY(name, expr) math_##name,
static const ew_math_fn math_loops[] = {MG_EW_MATH_FUNCTIONS(EW_MATH_ENTRY)};
#undef EW_MATH_ENTRY
enum { EW_NMATH = sizeof math_loops / sizeof math_loops[0] };

#define EW_NAME(name, expr) #name,
static const char *const unary_names[] = {MG_UNARY_ACTIVATIONS(EW_NAME)
                                              MG_SCALED_ACTIVATIONS(EW_NAME)};
static const char *const grad_names[] = {MG_BINARY_ACTIVATIONS(EW_NAME)};
static const char *const arith_names[] = {MG_BROADCAST_OPS(EW_NAME)};
static const char *const math_names[] = {MG_EW_MATH_FUNCTIONS(EW_NAME)};
#undef EW_NAME

int mg_elementwise_fn_count(int kind)
{
    switch (kind) {
    case MG_EW_UNARY: return ACT_NUNARY;
    case MG_EW_GRAD: return ACT_NBINARY;
    case MG_EW_ARITH: return BC_NOPS;
    case MG_EW_MATH: return EW_NMATH;
    default: return 0;
    }
}

const char *mg_elementwise_fn_name(int kind, int fn)
{
    if (fn < 0 || fn >= mg_elementwise_fn_count(kind))
        return NULL;
    return kind == MG_EW_UNARY  ? unary_names[fn]
           : kind == MG_EW_GRAD  ? grad_names[fn]
           : kind == MG_EW_ARITH ? arith_names[fn]
                                 : math_names[fn];
}

typedef struct {
    int64_t rows, cols;
    int ninputs, ncode, noutputs;
    const mg_ew_operand *inputs;
    const float *const *data;
    const mg_ew_instruction *code;
    const int32_t *out_regs;
    float *const *outputs;
    int32_t out_slot[MG_EW_MAX_REGS]; /* register -> output index, or -1 */
    const act_kernel_table *act;
    const bc_kernel_table *bc;
} program_call;

/* columns [c0, c0 + n) of row r through every instruction */
static void run_block(const program_call *p, int64_t r, int64_t c0, int64_t n, float *stack)
{
    const float *reg[MG_EW_MAX_REGS];
    for (int i = 0; i < p->ninputs; ++i) {
        const mg_ew_operand *in = &p->inputs[i];
        const float *row = p->data[i] + r / in->div * in->pitch;
        reg[i] = in->scalar ? row : row + c0;
    }
    for (int i = 0; i < p->ncode; ++i) {
        const int dst_reg = p->ninputs + i, slot = p->out_slot[dst_reg];
        float *dst = slot >= 0 ? p->outputs[slot] + r * p->cols + c0
                               : stack + (int64_t)i * MG_EW_BLOCK;
        const mg_ew_instruction *ins = &p->code[i];
        if (ins->kind == MG_EW_UNARY) {
            p->act->unary[ins->fn](reg[ins->a], dst, n, ins->alpha);
        } else if (ins->kind == MG_EW_GRAD) {
            p->act->binary[ins->fn](reg[ins->a], reg[ins->b], dst, n);
        } else if (ins->kind == MG_EW_MATH) {
            math_loops[ins->fn](reg[ins->a], dst, n);
        } else {
            const int sa = ins->a < p->ninputs && p->inputs[ins->a].scalar,
                      sb = ins->b < p->ninputs && p->inputs[ins->b].scalar;
            const bc_fn *loops = sa ? p->bc->sv : sb ? p->bc->vs : p->bc->vv;
            loops[ins->fn](reg[ins->a], reg[ins->b], dst, n);
        }
        reg[dst_reg] = dst;
    }
}

static void run_rows(void *ctx, int64_t lo, int64_t hi)
{
    const program_call *p = ctx;
    float stack[(MG_EW_MAX_REGS - 1) * MG_EW_BLOCK] __attribute__((aligned(64)));
    for (int64_t r = lo; r < hi; ++r)
        for (int64_t c0 = 0; c0 < p->cols; c0 += MG_EW_BLOCK)
            run_block(p, r, c0, p->cols - c0 < MG_EW_BLOCK ? p->cols - c0 : MG_EW_BLOCK,
                      stack);
}

static void run_column_blocks(void *ctx, int64_t lo, int64_t hi)
{
    const program_call *p = ctx;
    float stack[(MG_EW_MAX_REGS - 1) * MG_EW_BLOCK] __attribute__((aligned(64)));
    for (int64_t b = lo; b < hi; ++b) {
        const int64_t c0 = b * MG_EW_BLOCK;
        run_block(p, 0, c0, p->cols - c0 < MG_EW_BLOCK ? p->cols - c0 : MG_EW_BLOCK, stack);
    }
}

/* whether register `r` may be read by instruction i as a whole tensor (scalar_ok: or a
 * scalar input) */
static int readable(const program_call *p, int32_t r, int i, int scalar_ok)
{
    if (r < 0 || r >= p->ninputs + i)
        return 0;
    return scalar_ok || r >= p->ninputs || !p->inputs[r].scalar;
}

static int check_program(program_call *p)
{
    for (int i = 0; i < p->ninputs; ++i)
        if (!p->data[i] || p->inputs[i].div < 1 || p->inputs[i].pitch < 0)
            return 0;
    for (int i = 0; i < p->ncode; ++i) {
        const mg_ew_instruction *ins = &p->code[i];
        if (ins->fn < 0 || ins->fn >= mg_elementwise_fn_count(ins->kind))
            return 0;
        if ((ins->kind == MG_EW_UNARY || ins->kind == MG_EW_MATH) && !readable(p, ins->a, i, 0))
            return 0;
        if (ins->kind == MG_EW_GRAD && !(readable(p, ins->a, i, 0) && readable(p, ins->b, i, 0)))
            return 0;
        if (ins->kind == MG_EW_ARITH &&
            !(readable(p, ins->a, i, 1) && readable(p, ins->b, i, 1) &&
              (readable(p, ins->a, i, 0) || readable(p, ins->b, i, 0))))
            return 0;
    }
    for (int r = 0; r < MG_EW_MAX_REGS; ++r)
        p->out_slot[r] = -1;
    for (int k = 0; k < p->noutputs; ++k) {
        const int32_t r = p->out_regs[k];
        if (r < p->ninputs || r >= p->ninputs + p->ncode || p->out_slot[r] >= 0 ||
            !p->outputs[k])
            return 0;
        p->out_slot[r] = k;
    }
    return 1;
}

int mg_elementwise_program(int64_t rows, int64_t cols, int ninputs,
                           const mg_ew_operand *inputs, const float *const *data, int ncode,
                           const mg_ew_instruction *code, int noutputs,
                           const int32_t *out_regs, float *const *outputs, int num_threads)
{
    if (rows < 0 || cols < 0 || ninputs < 1 || ncode < 1 || noutputs < 1 ||
        ninputs + ncode > MG_EW_MAX_REGS || !inputs || !data || !code || !out_regs || !outputs ||
        (cols && rows > INT64_MAX / cols))
        return MG_EINVAL;
    program_call p = {rows, cols, ninputs, ncode, noutputs, inputs, data, code, out_regs, outputs,
                      {0}, activation_loops(), arithmetic_loops()};
    if (!check_program(&p))
        return MG_EINVAL;
    if (rows == 0 || cols == 0)
        return MG_OK;
    const int threads = mg_stream_threads(num_threads, rows * cols);
    if (rows == 1)
        mg_pool_rows(threads, (cols + MG_EW_BLOCK - 1) / MG_EW_BLOCK, 1, run_column_blocks, &p);
    else
        mg_pool_rows(threads, rows, 1, run_rows, &p);
    return MG_OK;
}

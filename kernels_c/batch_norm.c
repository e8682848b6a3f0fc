/* minigraph native batch norm: the driver.
 *
 * How a call runs
 * ---------------
 * The tensor (outer, C, inner) is cut into a FIXED list of blocks that depends only on the
 * shape, the dtype and the vector width, never on the thread count:
 *
 *   row blocks   (channels-last, inner == 1, or channels-first planes shorter than 32): a
 *                block is a range of whole rows of C*inner elements, one contiguous stretch.
 *                Position p of a row belongs to channel (p % (C*inner)) / inner. Rows are
 *                replicated so that a period of positions is a whole number of vectors of at
 *                least 128 floats (C = 3: 48 rows = 144 positions = 9 AVX-512 vectors), so
 *                SIMD runs across channels, with per-position coefficient arrays.
 *   plane blocks (channels-first, planes of >= 32 elements): a block is consecutive whole
 *                planes of one sample, a contiguous stretch, or the same stretch of several
 *                consecutive samples when planes are short (records of at least
 *                BN_RECORD_MIN_ELEMS elements per channel), or a chunk of one long plane;
 *                SIMD runs along each plane with the channel's coefficients and sums in
 *                registers.
 *
 * Blocks hold ~128 KB of each tensor (row blocks at least 256 rows, up to 512 KB: a block's
 * bookkeeping grows with C, and wide rows would otherwise pay it every 64 rows, measured
 * 10-15% of a 7x7x512 training call; plane blocks of short planes up to 512 KB as well, for
 * the same reason: see make_plan), so a block's statistics are computed with two
 * sub-passes (sums, then centered sums) while the block sits in L2: training ops stream the
 * tensors twice (statistics, then outputs), inference ops once (the inference backward's
 * outputs and sums in one pass). Row runs that read a block from memory walk it in memory
 * order, sums going to L1-resident position arrays, so the prefetchers see one forward
 * stream per tensor (where a whole period fits the registers, <= 128 floats with AVX-512,
 * the same memory order with coefficients and sums in registers); only the re-read from L2
 * walks chunks of a few vectors with sums in registers. Each pass always takes the same
 * order, so the results do not depend on the walk's speed choices: the chunked walk from
 * memory cost 256-512 channel NHWC calls 25-40% (bn_runs_template.h: the orders differ only
 * in how a partial last row's products round).
 * Each block writes a per-channel record (float32 vector sums, folded to double); the
 * records are then combined per channel in block order (Chan et al.'s pairwise update for
 * means and centered (co)moments, plain sums otherwise; channel ranges on the pool). Blocks
 * are run by minigraph's worker pool (the runtime every family uses; the machine may be
 * shared), each thread its own contiguous share first (mg_pool_run), and the result is
 * bit-identical for any thread count, any schedule and any buffer alignment.
 *
 * The element loops ("runs") are in bn_runs_template.h, instantiated per ISA and dtype
 * (bn_isa_*.c); the ISA is the runtime's (mg_runtime.h: chosen once with
 * __builtin_cpu_supports, mg_set_isa can narrow it for tests).
 */
#include "batch_norm.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bn_convert.h"
#include "bn_internal.h"

enum {
    BN_BLOCK_BYTES = 128 * 1024,    /* bytes of one tensor per block (stays in L2)            */
    BN_BLOCK_MIN_ROWS = 256,        /* row blocks have at least this many rows (few records)  */
    BN_ROW_MIN_PERIOD = 128,        /* rows are replicated to at least this many positions,   */
    BN_ROW_MAX_PERIOD = 4096,       /* but only while that stays below this many             */
    BN_PLANE_MIN_INNER = 32,        /* shorter channels-first planes use row blocks...        */
    BN_RECORD_MIN_ELEMS = 1024,     /* plane blocks span samples up to this many per channel  */
    BN_ROW_MAX_LEN = 1 << 16,       /* ...unless a row (C * inner) is longer than this        */
    BN_PARALLEL_MIN_ELEMS = 1 << 15, /* smaller tensors run on the calling thread (overhead)  */
    BN_MIN_PARALLEL_BLOCKS = 8,     /* ...larger ones keep this many blocks where they can    */
    BN_PARALLEL_MIN_RECORDS = 1 << 14 /* block records x channels merged on the pool         */
};

/* ------------------------------------------------------------------------------------------ */
/* Instruction set (chosen by the runtime, mg_runtime.c) and bfloat16 stores                   */

static int g_bf16_instructions = 1; /* see mg_bn_set_bf16_instructions */

static int bf16_instructions(void)
{
#if MG_X86
    __builtin_cpu_init();
    return __atomic_load_n(&g_bf16_instructions, __ATOMIC_RELAXED) &&
           __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

int mg_bn_set_bf16_instructions(int enable)
{
    __atomic_store_n(&g_bf16_instructions, enable != 0, __ATOMIC_RELAXED);
    return bf16_instructions();
}

/* Non-temporal stores (mg_bn_set_streaming): -1 chooses per call (call_streams), 0 never,
 * 1 wherever the stores are aligned. The stored bits are the same either way. */
static int g_stream_mode = -1;

int mg_bn_set_streaming(int mode)
{
    __atomic_store_n(&g_stream_mode, mode < 0 ? -1 : mode > 0, __ATOMIC_RELAXED);
    return __atomic_load_n(&g_stream_mode, __ATOMIC_RELAXED);
}

/* The run kernels of `dtype` for the ISA in use (mg_runtime.h's convention: one table per ISA,
 * picked once per call); with AVX-512, bfloat16 stores use AVX512-BF16 when enabled. */
typedef struct {
    const bn_run_table *dtype[3]; /* MG_BN_F32, MG_BN_F16, MG_BN_BF16 */
} bn_isa_tables;

static const bn_isa_tables bn_scalar = {{&bn_runs_scalar_f32, &bn_runs_scalar_f16,
                                         &bn_runs_scalar_bf16}};
#if MG_X86
static const bn_isa_tables bn_avx2 = {{&bn_runs_avx2_f32, &bn_runs_avx2_f16, &bn_runs_avx2_bf16}};
static const bn_isa_tables bn_avx512 = {{&bn_runs_avx512_f32, &bn_runs_avx512_f16,
                                         &bn_runs_avx512_bf16}};
#endif

static const bn_run_table *run_table(int dtype)
{
    static const void *const tables[MG_NISA] = MG_ISA_TABLES(&bn_scalar, &bn_avx2, &bn_avx512);
    if (dtype < MG_BN_F32 || dtype > MG_BN_BF16)
        return NULL;
    const bn_isa_tables *t = mg_isa_pick(tables);
#if MG_X86
    if (t == &bn_avx512 && dtype == MG_BN_BF16 && bf16_instructions())
        return &bn_runs_avx512bf16_bf16;
#endif
    return t->dtype[dtype];
}

/* ------------------------------------------------------------------------------------------ */
/* Blocks                                                                                      */

typedef struct {
    int64_t outer, channels, inner, row_len; /* row_len = channels * inner                    */
    int rows;                /* 1: row blocks; 0: plane blocks                                 */
    int64_t period, padded;  /* row blocks: positions per period; position array length      */
    int64_t head;            /* row blocks: elements before the first aligned one (see row_head) */
    int64_t nblocks;
    int64_t block_channels;  /* most channels in a block: C (rows), channels_per_block (planes) */
    int64_t acc_len;         /* floats per accumulator array                                   */
    int64_t rows_per_block;                                                 /* row blocks   */
    int64_t channels_per_block, chunk, chunks_per_plane, blocks_per_sample; /* plane blocks */
    int64_t samples_per_block;                                               /* plane blocks */
} bn_plan;

typedef struct {
    int64_t start;        /* element offset of the block                                       */
    int64_t len;          /* row blocks: elements; plane blocks: elements per segment           */
    int64_t c0, nc;       /* the block's channels [c0, c0 + nc); plane blocks: segment s is
                             channel c0 + s, segments are `inner` elements apart               */
    int64_t count;        /* elements per channel in the block                                  */
    int64_t nsamples;     /* plane blocks: the stretch repeats for this many consecutive samples,
                             row_len elements apart (row blocks: 1)                              */
} bn_block;

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        const int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static void make_plan(bn_plan *p, int64_t outer, int64_t channels, int64_t inner, int vlen,
                      size_t elsize)
{
    const int64_t block_elems = BN_BLOCK_BYTES / (int64_t)elsize;
    memset(p, 0, sizeof *p);
    p->outer = outer;
    p->channels = channels;
    p->inner = inner;
    p->row_len = channels * inner;
    p->rows = inner == 1 || (inner < BN_PLANE_MIN_INNER && p->row_len <= BN_ROW_MAX_LEN);
    if (p->rows) {
        /* replicate rows until a period is a whole number of vectors (if that stays short) */
        int64_t reps = vlen / gcd64(p->row_len, vlen);
        if (reps * p->row_len > BN_ROW_MAX_PERIOD)
            reps = 1;
        while (reps * p->row_len < BN_ROW_MIN_PERIOD)
            reps *= 2;
        p->period = reps * p->row_len;
        /* zero padding: row runs read and add whole vectors, up to 8 past the period */
        p->padded = ceil_div(p->period, vlen) * vlen + 8 * vlen;
        int64_t rows = reps * max64(1, block_elems / p->period);
        if (rows < BN_BLOCK_MIN_ROWS) /* fewer records per element; capped at 4 blocks' worth */
            rows = reps * max64(rows / reps, min64(ceil_div(BN_BLOCK_MIN_ROWS, reps),
                                                   4 * block_elems / p->period));
        p->rows_per_block = rows;
        p->nblocks = ceil_div(outer, rows);
        p->block_channels = channels;
        p->acc_len = p->padded;
    } else {
        if (inner > block_elems) { /* one channel's chunk of one plane per block */
            p->chunks_per_plane = ceil_div(inner, block_elems);
            p->chunk = ceil_div(inner, p->chunks_per_plane);
            p->chunks_per_plane = ceil_div(inner, p->chunk);
            p->channels_per_block = 1;
        } else { /* consecutive whole planes of one or more samples per block */
            p->chunks_per_plane = 1;
            p->chunk = inner;
            p->channels_per_block = min64(channels, block_elems / inner);
            /* whole samples of short planes: a block record (written, read back and merged
             * per channel: combine_moments) costs about as much as summing a 7x7 plane, so
             * a block spans consecutive samples, up to BN_RECORD_MIN_ELEMS elements per
             * channel and 4 blocks' worth of bytes (still in L2 for the second sub-pass):
             * 256x512x7x7 float16 had 131072 records of 49 elements, 17% of its training
             * forward. (Splitting the channels too, for longer records, walks stretches of
             * a few KB from memory: 0.7-0.9x.) Calls that run on the pool keep at least
             * BN_MIN_PARALLEL_BLOCKS blocks (two blocks of 8x32x16x16 on 2 threads: 0.9x). */
            if (p->channels_per_block == channels) {
                int64_t samples = min64(ceil_div(BN_RECORD_MIN_ELEMS, inner),
                                        4 * block_elems / p->row_len);
                if (outer * p->row_len >= BN_PARALLEL_MIN_ELEMS)
                    samples = min64(samples, outer / BN_MIN_PARALLEL_BLOCKS);
                p->samples_per_block = max64(1, min64(outer, samples));
            }
        }
        if (!p->samples_per_block)
            p->samples_per_block = 1;
        p->blocks_per_sample = ceil_div(channels, p->channels_per_block) * p->chunks_per_plane;
        p->nblocks = ceil_div(outer, p->samples_per_block) * p->blocks_per_sample;
        p->block_channels = p->channels_per_block;
        p->acc_len = p->channels_per_block;
        p->period = p->padded = vlen;
    }
}

static void plan_block(const bn_plan *p, int64_t b, bn_block *blk)
{
    if (p->rows) {
        const int64_t r0 = b * p->rows_per_block, r1 = min64(p->outer, r0 + p->rows_per_block);
        blk->start = r0 * p->row_len;
        blk->len = (r1 - r0) * p->row_len;
        blk->c0 = 0;
        blk->nc = p->channels;
        blk->count = (r1 - r0) * p->inner;
        blk->nsamples = 1;
    } else {
        const int64_t n = b / p->blocks_per_sample * p->samples_per_block,
                      r = b % p->blocks_per_sample;
        const int64_t i0 = (r % p->chunks_per_plane) * p->chunk;
        blk->c0 = (r / p->chunks_per_plane) * p->channels_per_block;
        blk->nc = min64(p->channels_per_block, p->channels - blk->c0);
        blk->len = min64(p->chunk, p->inner - i0);
        blk->start = (n * p->channels + blk->c0) * p->inner + i0;
        blk->nsamples = min64(p->samples_per_block, p->outer - n);
        blk->count = blk->len * blk->nsamples;
    }
}

/* ------------------------------------------------------------------------------------------ */
/* One call: buffers, passes over the blocks                                                   */

typedef struct bn_call bn_call;
typedef void (*bn_block_fn)(bn_call *k, int64_t b, int tid);

struct bn_call {
    bn_plan plan;
    const bn_run_fn *runs;   /* the row or plane flavour of the run table */
    size_t elsize;
    int vlen;                /* floats per vector of the run table */
    int dtype;
    int nthreads;
    const char *x, *dy, *gx;
    char *out0, *out1;
    const char *relu_y;      /* _FusedBatchNormGradEx: dy is masked by this Relu output   */
    const char *dy2;         /* ... after this addend is added to it (or NULL)            */
    /* the current pass */
    int run;                 /* BN_* run id (pass_block) */
    int ncoef, nacc;         /* coefficient vectors it reads, accumulators it folds into records */
    int nvars;               /* statistics pass (stats_block): 1 (x) or 3 (x, dy, gx) */
    int nfields;             /* doubles per channel in a block record */
    int stream;              /* element passes store whole vectors non-temporally (see
                                call_streams), where aligned (block_stream) */
    /* workspace (one buffer, see call_workspace) */
    int32_t *chan;           /* row blocks: channel of each position, [period] */
    float *coef;             /* per-channel coefficient vectors, [BN_NCOEF][C] */
    float *row_coef;         /* row blocks: coef expanded to positions, [BN_NCOEF][padded] */
    double *records;         /* [nblocks][nfields][block_channels] */
    double *combined;        /* [BN_NACC][C] */
    double *counts;          /* [C] */
    char *scratch;           /* per thread, scratch_stride bytes each */
    size_t scratch_stride;
};

typedef struct {
    float *acc[BN_NACC];  /* [acc_len] each */
    float *pos[3];        /* row blocks: block means expanded to positions, [padded] each */
    double *fold;         /* [BN_NACC][block_channels] */
    float *means;         /* [3][block_channels] */
} bn_scratch;

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

static bn_scratch thread_scratch(const bn_call *k, int tid)
{
    bn_scratch s;
    const bn_plan *p = &k->plan;
    char *base = k->scratch + (size_t)tid * k->scratch_stride;
    for (int i = 0; i < BN_NACC; ++i, base += round64((size_t)p->acc_len * sizeof(float)))
        s.acc[i] = (float *)base;
    for (int i = 0; i < 3; ++i, base += round64((size_t)p->padded * sizeof(float)))
        s.pos[i] = (float *)base;
    s.fold = (double *)base;
    base += round64((size_t)BN_NACC * (size_t)p->block_channels * sizeof(double));
    s.means = (float *)base;
    return s;
}

/* Row runs in memory order start at the first element of `ref` (the call's output) that
 * is aligned to a vector, the elements before it being a masked head: aligned stores and
 * loads are faster, and numpy's large arrays sit 16 bytes past a 64-byte boundary. All
 * blocks and rows share that alignment when the period is a whole number of vectors
 * (otherwise: no head). The head does not change the sums: each position still adds its
 * terms in row order, and fold reads the positions in row order (the results do not depend
 * on where the buffers happen to be). */
static int64_t row_head(const bn_plan *p, const void *ref, int vlen, size_t elsize)
{
    const size_t align = (size_t)vlen * elsize, misalign = (uintptr_t)ref % align;
    if (!p->rows || p->period % vlen || misalign % elsize || misalign == 0)
        return 0;
    return (int64_t)((align - misalign) / elsize);
}

/* The workspace of a call: a buffer kept per calling thread and grown as needed (freed when
 * the thread exits). Allocating it afresh on every call costs page faults whenever the C
 * library hands large blocks back to the system: ~10% of a call with many small blocks. */
typedef struct {
    void *data;
    size_t size;
} bn_workspace;

static pthread_key_t g_workspace_key;
static pthread_once_t g_workspace_once = PTHREAD_ONCE_INIT;

static void workspace_free(void *w)
{
    free(((bn_workspace *)w)->data);
    free(w);
}

static void workspace_key_init(void) { pthread_key_create(&g_workspace_key, workspace_free); }

static void *call_workspace(size_t size)
{
    pthread_once(&g_workspace_once, workspace_key_init);
    bn_workspace *w = pthread_getspecific(g_workspace_key);
    if (!w) {
        if (!(w = calloc(1, sizeof *w)))
            return NULL;
        if (pthread_setspecific(g_workspace_key, w)) {
            free(w);
            return NULL;
        }
    }
    if (w->size < size) {
        free(w->data);
        w->data = aligned_alloc(64, (size + 63) & ~(size_t)63);
        w->size = w->data ? size : 0;
    }
    return w->data;
}

static int call_init(bn_call *k, int dtype, int64_t outer, int64_t channels, int64_t inner,
                     int nfields, int num_threads, const void *align_ref)
{
    memset(k, 0, sizeof *k);
    const bn_run_table *table = run_table(dtype);
    if (!table)
        return MG_EINVAL;
    k->dtype = dtype;
    k->elsize = dtype == MG_BN_F32 ? 4 : 2;
    k->vlen = table->vlen;
    k->nfields = nfields;
    make_plan(&k->plan, outer, channels, inner, table->vlen, k->elsize);
    k->plan.head = row_head(&k->plan, align_ref, table->vlen, k->elsize);
    const bn_plan *p = &k->plan;
    k->runs = p->rows ? table->row : table->plane;

    k->nthreads = 1;
    if (outer * p->row_len >= BN_PARALLEL_MIN_ELEMS)
        k->nthreads = mg_native_threads((int)min64(num_threads, p->nblocks));

    const size_t pos_bytes = round64((size_t)p->padded * sizeof(float));
    k->scratch_stride = BN_NACC * round64((size_t)p->acc_len * sizeof(float)) + 3 * pos_bytes +
                        round64((size_t)BN_NACC * (size_t)p->block_channels * sizeof(double)) +
                        round64(3 * (size_t)p->block_channels * sizeof(float));
    const size_t sizes[] = {
        p->rows ? round64((size_t)p->period * sizeof(int32_t)) : 0,
        round64((size_t)BN_NCOEF * (size_t)channels * sizeof(float)),
        p->rows ? BN_NCOEF * pos_bytes : 0,
        round64((size_t)p->nblocks * (size_t)nfields * (size_t)p->block_channels * sizeof(double)),
        round64((size_t)BN_NACC * (size_t)channels * sizeof(double)),
        round64((size_t)channels * sizeof(double)),
        (size_t)k->nthreads * k->scratch_stride,
    };
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; ++i)
        total += sizes[i];
    char *base = call_workspace(total);
    if (!base)
        return MG_ENOMEM;
    k->chan = (int32_t *)base;
    base += sizes[0];
    k->coef = (float *)base;
    base += sizes[1];
    k->row_coef = (float *)base;
    base += sizes[2];
    k->records = (double *)base;
    base += sizes[3];
    k->combined = (double *)base;
    base += sizes[4];
    k->counts = (double *)base;
    base += sizes[5];
    k->scratch = base;
    if (p->rows) { /* channel of position pos: (pos % row_len) / inner, without divisions */
        int64_t pos = 0;
        while (pos < p->period)
            for (int32_t c = 0; c < channels; ++c)
                for (int64_t i = 0; i < inner; ++i)
                    k->chan[pos++] = c;
    }
    return 0;
}


static float *chan_coef(const bn_call *k, int i)
{
    return k->coef + (size_t)i * (size_t)k->plan.channels;
}

static double *record(const bn_call *k, int64_t b)
{
    return k->records + (size_t)b * (size_t)k->nfields * (size_t)k->plan.block_channels;
}

typedef struct {
    bn_call *k;
    bn_block_fn fn;
} bn_blocks_job;

static void run_block_item(void *ctx, int64_t b, int tid)
{
    const bn_blocks_job *job = ctx;
    job->fn(job->k, b, tid);
}

/* fn(k, b, tid) for every block on the worker pool (mg_pool_run: thread t runs the
 * t-th contiguous share of the blocks, then helps with the others', so a pass that re-reads
 * what the previous pass or call touched finds its share in its own core's caches:
 * 8x32x112x112 float32 NCHW inference 0.42 -> 0.23 ms on 2 threads, training passes alike,
 * where blocks handed out one at a time alternated between the threads from call to call;
 * tid < k->nthreads indexes the per-thread scratch). */
static void run_blocks(bn_call *k, bn_block_fn fn)
{
    bn_blocks_job job = {k, fn};
    mg_pool_run(k->nthreads, k->plan.nblocks, run_block_item, &job);
}

/* Run args for sample j of the block (j < blk->nsamples): tensors at the start of its
 * stretch, its length / segments, accumulators zeroed (row runs add to them; plane runs
 * overwrite them). chunks: row runs walk the block in chunks with sums in registers, for a
 * block already in cache (bn_runs_template.h); else in memory order from the aligned head
 * (row_head) on. */
static void block_args(const bn_call *k, const bn_block *blk, int64_t j, const bn_scratch *s,
                       int nacc, int chunks, bn_run_args *a)
{
    const size_t off = (size_t)(blk->start + j * k->plan.row_len) * k->elsize;
    memset(a, 0, sizeof *a);
    a->x = k->x ? k->x + off : NULL;
    a->dy = k->dy ? k->dy + off : NULL;
    a->gx = k->gx ? k->gx + off : NULL;
    a->dy2 = k->dy2 ? k->dy2 + off : NULL;
    a->out0 = k->out0 ? k->out0 + off : NULL;
    a->out1 = k->out1 ? k->out1 + off : NULL;
    a->len = blk->len;
    a->period = k->plan.period;
    a->chunks = chunks;
    a->head = chunks ? 0 : k->plan.head;
    a->nseg = k->plan.rows ? 1 : blk->nc;
    a->seg_stride = k->plan.inner;
    for (int i = 0; i < nacc; ++i) {
        a->acc[i] = s->acc[i];
        if (k->plan.rows)
            memset(s->acc[i], 0, (size_t)k->plan.padded * sizeof(float));
    }
}

/* out[i][c] = sum of accumulator i over the block's channel c (c local to the block), row
 * blocks in the order of the positions counted from the row start whatever the run's head
 * (its position arrays count from the head: see bn_runs_template.h), so that the sums do not
 * depend on where the buffers happen to be. Plane blocks of several samples fold the run of
 * each sample j in turn: j > 0 adds to out (in double, in sample order). */
static void fold(const bn_call *k, const bn_block *blk, int64_t j, const bn_run_args *run,
                 double *out, int nacc)
{
    const bn_plan *p = &k->plan;
    const int64_t nc = blk->nc;
    for (int i = 0; i < nacc; ++i) {
        double *o = out + (size_t)i * (size_t)nc;
        const float *a = run->acc[i];
        if (p->rows) { /* the positions the block touched */
            const int64_t used = min64(p->period, blk->len), head = run->head;
            for (int64_t c = 0; c < nc; ++c)
                o[c] = 0.0;
            for (int64_t pos = 0; pos < used; ++pos)
                o[k->chan[pos]] += a[pos >= head ? pos - head : pos - head + p->period];
        } else if (j == 0) { /* one sum per segment */
            for (int64_t c = 0; c < nc; ++c)
                o[c] = a[c];
        } else {
            for (int64_t c = 0; c < nc; ++c)
                o[c] += a[c];
        }
    }
}

/* dst[pos] = vals[channel of the elements at position pos], zero padded (row blocks);
 * head: the run's head (see row_head). */
static void expand(const bn_call *k, const float *vals, float *dst, int64_t head)
{
    const bn_plan *p = &k->plan;
    for (int64_t pos = 0; pos < p->period; ++pos)
        dst[pos] = vals[k->chan[pos + head < p->period ? pos + head : pos + head - p->period]];
    for (int64_t pos = p->period; pos < p->padded; ++pos)
        dst[pos] = 0.0f;
}

/* Co-moment pairs (a, b) of the statistics passes: x*x, then dy*x, gx*x, gx*dy. */
static const int pair_a[4] = {0, 1, 2, 2}, pair_b[4] = {0, 0, 0, 1};
static int npairs(int nvars) { return nvars == 1 ? 1 : 4; }

/* Statistics of one block (variables v: x; or x, dy, gx), two sub-passes over the block:
 *   1. s_v = sum(v)                    -> block mean m_v = s_v / count (float32)
 *   2. d_v = sum(v - m_v), P_ab = sum((a - m_a) * (b - m_b))
 * (row blocks: the first from memory, in memory order; the second from L2, in chunks)
 * and the record, corrected for the rounding of m_v (corrected two-pass algorithm):
 *   mean_v = m_v + d_v / count,  M_ab = P_ab - d_a * d_b / count. */
static void stats_block(bn_call *k, int64_t b, int tid)
{
    bn_block blk;
    plan_block(&k->plan, b, &blk);
    const bn_scratch s = thread_scratch(k, tid);
    const int nvars = k->nvars, np = npairs(nvars);
    const size_t nc = (size_t)blk.nc;
    const double inv_count = 1.0 / (double)blk.count; /* multiplied: divisions are slow */
    bn_run_args a;

    for (int64_t j = 0; j < blk.nsamples; ++j) {
        block_args(k, &blk, j, &s, nvars, 0, &a);
        k->runs[nvars == 1 ? BN_SUM_X : BN_GG_SUM](&a);
        fold(k, &blk, j, &a, s.fold, nvars);
    }

    const float *means[3];
    for (int v = 0; v < nvars; ++v) {
        float *m = s.means + v * nc;
        for (size_t c = 0; c < nc; ++c)
            m[c] = (float)(s.fold[v * nc + c] * inv_count);
        if (k->plan.rows) {
            expand(k, m, s.pos[v], 0);
            means[v] = s.pos[v];
        } else {
            means[v] = m;
        }
    }
    for (int64_t j = 0; j < blk.nsamples; ++j) {
        block_args(k, &blk, j, &s, nvars + np, 1, &a);
        for (int v = 0; v < nvars; ++v)
            a.k[v] = means[v];
        k->runs[nvars == 1 ? BN_DEV_X : BN_GG_DEV](&a);
        fold(k, &blk, j, &a, s.fold, nvars + np);
    }

    double *rec = record(k, b);
    const double *dev = s.fold, *prod = s.fold + nvars * nc;
    for (size_t c = 0; c < nc; ++c) {
        for (int v = 0; v < nvars; ++v)
            rec[v * nc + c] = s.means[v * nc + c] + dev[v * nc + c] * inv_count;
        for (int q = 0; q < np; ++q) {
            double m2 = prod[q * nc + c] -
                        dev[pair_a[q] * nc + c] * dev[pair_b[q] * nc + c] * inv_count;
            if (q == 0 && m2 < 0.0) /* a sum of squares; keeps NaN */
                m2 = 0.0;
            rec[(nvars + q) * nc + c] = m2;
        }
    }
}

/* Merges the block records in block order (Chan, Golub & LeVeque's pairwise update):
 *   n = na + nb, f = nb / n, delta_v = mean_v(b) - mean_v(a),
 *   mean_v += delta_v * f,  M_ab += M_ab(b) + delta_a * delta_b * na * f.
 * combined[v][c] = mean of variable v, combined[nvars + q][c] = co-moment of pair q.
 * Channels [lo, hi) only: channels merge independently (see combine). */
static void combine_moments(const bn_call *k, int64_t lo, int64_t hi)
{
    const size_t C = (size_t)k->plan.channels;
    const int nvars = k->nvars, np = npairs(nvars);
    for (int i = 0; i < nvars + np; ++i)
        memset(k->combined + (size_t)i * C + (size_t)lo, 0, (size_t)(hi - lo) * sizeof(double));
    memset(k->counts + lo, 0, (size_t)(hi - lo) * sizeof(double));
    for (int64_t b = 0; b < k->plan.nblocks; ++b) {
        bn_block blk;
        plan_block(&k->plan, b, &blk);
        const int64_t c0 = max64(blk.c0, lo), c1 = min64(blk.c0 + blk.nc, hi);
        if (c0 >= c1)
            continue;
        const double *rec = record(k, b);
        const size_t nc = (size_t)blk.nc;
        /* all channels of a block have the same running count (same blocks so far) */
        const double na = k->counts[c0], n = na + (double)blk.count;
        const double f = (double)blk.count / n, w = na * f;
        for (size_t c = (size_t)(c0 - blk.c0); c < (size_t)(c1 - blk.c0); ++c) {
            double delta[3];
            double *out = k->combined + blk.c0 + c;
            for (int v = 0; v < nvars; ++v) {
                delta[v] = rec[v * nc + c] - out[v * C];
                out[v * C] += delta[v] * f;
            }
            for (int q = 0; q < np; ++q)
                out[(nvars + q) * C] +=
                    rec[(nvars + q) * nc + c] + delta[pair_a[q]] * delta[pair_b[q]] * w;
            k->counts[blk.c0 + c] = n;
        }
    }
}

/* combined[i][c] = sum over blocks (in block order) of the records' field i, channels
 * [lo, hi). */
static void combine_sums(const bn_call *k, int64_t lo, int64_t hi)
{
    const size_t C = (size_t)k->plan.channels;
    for (int i = 0; i < k->nfields; ++i)
        memset(k->combined + (size_t)i * C + (size_t)lo, 0, (size_t)(hi - lo) * sizeof(double));
    for (int64_t b = 0; b < k->plan.nblocks; ++b) {
        bn_block blk;
        plan_block(&k->plan, b, &blk);
        const int64_t c0 = max64(blk.c0, lo), c1 = min64(blk.c0 + blk.nc, hi);
        const double *rec = record(k, b);
        const size_t nc = (size_t)blk.nc;
        for (int i = 0; i < k->nfields; ++i)
            for (int64_t c = c0; c < c1; ++c)
                k->combined[i * C + (size_t)c] += rec[i * nc + (size_t)(c - blk.c0)];
    }
}

typedef struct {
    const bn_call *k;
    void (*fn)(const bn_call *k, int64_t lo, int64_t hi);
} bn_combine_job;

static void combine_rows(void *ctx, int64_t lo, int64_t hi)
{
    const bn_combine_job *job = ctx;
    job->fn(job->k, lo, hi);
}

/* fn over all channels: every channel merges its own records in block order, so channel
 * ranges run on the worker pool (bit-identical for any split) once there are enough
 * records to pay for waking it (256 blocks x 512 channels serially: ~5% of a call). */
static void combine(const bn_call *k, void (*fn)(const bn_call *k, int64_t lo, int64_t hi))
{
    const int64_t C = k->plan.channels;
    if (k->nthreads > 1 && k->plan.nblocks * C >= BN_PARALLEL_MIN_RECORDS) {
        bn_combine_job job = {k, fn};
        mg_pool_rows(k->nthreads, C, 16, combine_rows, &job);
    } else {
        fn(k, 0, C);
    }
}

static double combined(const bn_call *k, int i, int64_t c)
{
    return k->combined[(size_t)i * (size_t)k->plan.channels + (size_t)c];
}

/* Whether a block's run may store whole vectors non-temporally: the call streams, and every
 * whole vector the run stores is aligned to a vector. Row runs: rows are whole vectors and
 * the block's outputs are aligned after the head (row_head). Plane runs: segments a whole
 * number of vectors apart (so that the masked ends of neighbouring segments, plain stores,
 * share cache lines only with each other: a line written partly non-temporally and partly
 * not is slow), except for runs that only write over planes of at least a vector: those walk
 * the block as one stretch (bn_runs_template.h's BN_PLANE_WALK), plain stores only at its
 * ends; runs that only write align their stores with a head themselves (the outputs must
 * share their alignment), runs that also sum cannot (their vector partition fixes the sums'
 * order), so their segments must start aligned; runs that sum over short planes walk them on
 * the grid of the block's start (bn_plane_sums_walk) and never stream. */
static int block_stream(const bn_call *k, const bn_run_args *a)
{
    const size_t align = (size_t)k->vlen * k->elsize;
    const uintptr_t misalign = (uintptr_t)a->out0 % align;
    if (!k->stream || !a->out0 || misalign % k->elsize ||
        (a->out1 && (uintptr_t)a->out1 % align != misalign))
        return 0;
    if (k->plan.rows)
        return k->plan.period % k->vlen == 0 &&
               ((uintptr_t)a->out0 + (size_t)a->head * k->elsize) % align == 0;
    if (bn_plane_sums_walk(a, k->vlen, k->nacc))
        return 0;
    const int walk = k->nacc == 0 && k->vlen > 1 && a->len >= k->vlen;
    if (a->nseg > 1 && (size_t)k->plan.inner * k->elsize % align && !walk)
        return 0;
    return k->nacc == 0 || misalign == 0;
}

/* One element pass over a block: run k->run with k->ncoef per-channel coefficient vectors
 * (chan_coef; row blocks: row_coef, from the head on) in memory order; its k->nacc
 * accumulators are folded into the block's record. */
static void pass_block(bn_call *k, int64_t b, int tid)
{
    bn_block blk;
    plan_block(&k->plan, b, &blk);
    const bn_scratch s = thread_scratch(k, tid);
    bn_run_args a;
    for (int64_t j = 0; j < blk.nsamples; ++j) {
        block_args(k, &blk, j, &s, k->nacc, 0, &a);
        a.stream = block_stream(k, &a);
        for (int i = 0; i < k->ncoef; ++i)
            a.k[i] = k->plan.rows ? k->row_coef + (size_t)i * (size_t)k->plan.padded
                                  : chan_coef(k, i) + blk.c0;
        k->runs[k->run](&a);
        if (k->nacc)
            fold(k, &blk, j, &a, record(k, b), k->nacc);
    }
}

/* Whether an element pass stores non-temporally: when the tensors the call touches (read
 * and written, once each) exceed the last-level cache as this CPU reports it
 * (mg_cache_size), its outputs would leave the cache before anyone reads them, and
 * non-temporal stores save the read of each output line before it is written (a third of
 * the output traffic; about a fifth of a training backward's). Smaller calls keep their
 * outputs in cache for the next op. */
static int call_streams(const bn_call *k)
{
    const int mode = __atomic_load_n(&g_stream_mode, __ATOMIC_RELAXED);
    if (mode >= 0)
        return mode;
    const void *const tensors[] = {k->x, k->dy, k->gx, k->out0, k->out1};
    int64_t count = 0;
    for (size_t i = 0; i < sizeof tensors / sizeof tensors[0]; ++i)
        count += tensors[i] != NULL;
    const int64_t cache = mg_cache_size(3) ? mg_cache_size(3) : mg_cache_size(2);
    const double bytes = (double)count * (double)k->plan.outer * (double)k->plan.row_len *
                         (double)k->elsize;
    return cache > 0 && bytes > (double)cache;
}

/* Runs an element pass over all blocks; coefficients must be in chan_coef(k, 0..ncoef-1). */
static void element_pass(bn_call *k, int run, int ncoef, int nacc)
{
    k->run = run;
    k->ncoef = ncoef;
    k->nacc = nacc;
    k->stream = call_streams(k);
    if (k->plan.rows)
        for (int i = 0; i < ncoef; ++i)
            expand(k, chan_coef(k, i), k->row_coef + (size_t)i * (size_t)k->plan.padded,
                   k->plan.head);
    run_blocks(k, pass_block);
}

static void statistics_pass(bn_call *k, int nvars)
{
    k->nvars = nvars;
    run_blocks(k, stats_block);
    combine(k, combine_moments);
}

/* rsqrt(variance + epsilon) in float32, exactly as the reference computes it:
 * 1 / sqrt(variance + float32(epsilon)), each operation rounded to float32. The per-channel
 * factors built from it (scale * r, gscale * r) are float32 products as well, so inference
 * outputs such as dx = dy * (scale * r) are bit-identical to the reference's. */
static float rsqrt_f32(float variance, double epsilon)
{
    return 1.0f / sqrtf(variance + (float)epsilon);
}

/* ------------------------------------------------------------------------------------------ */
/* Exceptional channels                                                                        */

/* The element loops sum in float32 vectors (block records in double) and evaluate the
 * outputs from per-channel coefficients (x - mean) * k + ..., an algebraic rearrangement of
 * the reference formulas that is exact in real arithmetic. With infinities, NaNs or values
 * near the float32 range the two part ways: a block mean of -inf makes x - mean NaN where the
 * reference's mean(x) is -inf, float32 lane sums of 3.4e38 overflow where the reference's
 * float64 sums do not, inf * 0 appears in a coefficient where the reference has a finite
 * product. So every op checks each channel after its statistics pass (cheap: a few compares
 * per channel, the element loops stay as they are), and recomputes an "exceptional" channel
 * with the scalar routines below, which follow the reference formulas operation by
 * operation: float32 element arithmetic in the reference's order, per-channel sums of the
 * float32 terms accumulated in double and rounded to float32 where the reference rounds
 * them. A channel is exceptional when a statistic, a per-channel input or a coefficient is
 * NaN or infinite, a mean or per-channel input exceeds BN_BIG_VALUE, or a sum (of squares,
 * products) exceeds BN_BIG_SUM: below those bounds no float32 term of either formula can
 * overflow, and all values are finite. */
#define BN_BIG_VALUE 0x1p60  /* |x| <= 2^60: squares and products stay below 2^121 */
#define BN_BIG_SUM 0x1p120   /* sums of squares / products: no term above 2^120     */

static int beyond(double v, double limit) { return !(fabs(v) <= limit); } /* NaN: beyond */

static int vector_beyond(const float *v, int64_t c) { return v && beyond(v[c], BN_BIG_VALUE); }

static float load1(const bn_call *k, const char *t, int64_t i)
{
    if (k->dtype == MG_BN_F32)
        return ((const float *)t)[i];
    const uint16_t h = ((const uint16_t *)t)[i];
    return k->dtype == MG_BN_F16 ? bn_f16_to_f32(h) : bn_bf16_to_f32(h);
}

static void store1(const bn_call *k, char *t, int64_t i, float v)
{
    if (k->dtype == MG_BN_F32)
        ((float *)t)[i] = v;
    else
        ((uint16_t *)t)[i] = k->dtype == MG_BN_F16 ? bn_f32_to_f16(v) : bn_f32_to_bf16(v);
}

/* For every element index i of channel c, in memory order. */
#define BN_FOR_CHANNEL(k, c, i)                                                     \
    for (int64_t o_ = 0; o_ < (k)->plan.outer; ++o_)                                \
        for (int64_t i = (o_ * (k)->plan.channels + (c)) * (k)->plan.inner,         \
                     end_ = i + (k)->plan.inner;                                    \
             i < end_; ++i)

/* float64 sums of float32 terms, as the reference's sum(dtype=float64) */
static double channel_sum(const bn_call *k, int64_t c, const char *t)
{
    double s = 0.0;
    BN_FOR_CHANNEL(k, c, i)
        s += load1(k, t, i);
    return s;
}

/* sum((t - m)^2) with the float32 differences and products */
static double channel_dev2(const bn_call *k, int64_t c, const char *t, float m)
{
    double s = 0.0;
    BN_FOR_CHANNEL(k, c, i) {
        const float d = load1(k, t, i) - m;
        s += d * d;
    }
    return s;
}


/* Training forward, reference order: mean = f32(sum(x) / n), var = f32(sum((x - mean)^2) / n),
 * y = (x - mean) * (scale * r) + offset. */
static void exact_forward_training(const bn_call *k, int64_t c, float scale, float offset,
                                   double epsilon, char *y, float *mean, float *variance)
{
    const double n = (double)k->plan.outer * (double)k->plan.inner;
    const float mu = (float)(channel_sum(k, c, k->x) / n);
    const float var = (float)(channel_dev2(k, c, k->x, mu) / n);
    const float factor = scale * rsqrt_f32(var, epsilon);
    mean[c] = mu;
    variance[c] = var;
    BN_FOR_CHANNEL(k, c, i)
        store1(k, y, i, (load1(k, k->x, i) - mu) * factor + offset);
}

/* Backward, reference order: r = rsqrt(var + eps), xc = x - mean, S1 = f32(sum(dy)),
 * S2 = f32(sum(dy * xc)), n = f32(count); offset_backprop = S1, scale_backprop = S2 * r;
 * training: dx = (scale * r) * ((dy - S1 / n) - xc * (((S2 / n) * r) * r));
 * inference: dx = dy * (scale * r). */
/* dy at element i; for _FusedBatchNormGradEx masked by the Relu output as mg_relu_grad */
static float load_dy(const bn_call *k, int64_t i)
{
    const float g = load1(k, k->dy, i);
    return !k->relu_y || load1(k, k->relu_y, i) > 0.0f ? g : g * 0.0f;
}

static void exact_backward(const bn_call *k, int64_t c, int training, float scale, float mean,
                           float variance, double epsilon, char *dx, float *scale_backprop,
                           float *offset_backprop)
{
    const float n = (float)((double)k->plan.outer * (double)k->plan.inner);
    const float r = rsqrt_f32(variance, epsilon), factor = scale * r;
    double sum_dy = 0.0, sum_dy_xc = 0.0; /* float64 sums of float32 terms */
    BN_FOR_CHANNEL(k, c, i) {
        const float g = load_dy(k, i);
        sum_dy += g;
        sum_dy_xc += g * (load1(k, k->x, i) - mean);
    }
    const float s1 = (float)sum_dy, s2 = (float)sum_dy_xc;
    offset_backprop[c] = s1;
    scale_backprop[c] = s2 * r;
    const float mean_dy = s1 / n, m2 = ((s2 / n) * r) * r;
    BN_FOR_CHANNEL(k, c, i) {
        const float g = load_dy(k, i);
        store1(k, dx, i,
               training ? factor * ((g - mean_dy) - (load1(k, k->x, i) - mean) * m2)
                        : g * factor);
    }
}

/* Second order, training, reference order (see mg_bn_grad_grad_training for the formulas):
 * the statistics and the means of dy, gx, dy*xh, gx*xh, gx*dy are float32 (sums in double),
 * xh = (x - mu) * r, and d_dy, d_x, d_scale are evaluated term by term in float32. */
static void exact_grad_grad_training(const bn_call *k, int64_t c, float s, float gs, float go,
                                     double epsilon, char *d_dy, char *d_x, float *d_scale)
{
    const double n = (double)k->plan.outer * (double)k->plan.inner;
    const float mu = (float)(channel_sum(k, c, k->x) / n);
    const float r = rsqrt_f32((float)(channel_dev2(k, c, k->x, mu) / n), epsilon);
    double sum_dyxh = 0.0, sum_gxxh = 0.0, sum_gxdy = 0.0;
    BN_FOR_CHANNEL(k, c, i) {
        const float xh = (load1(k, k->x, i) - mu) * r;
        const float dy = load1(k, k->dy, i), gx = load1(k, k->gx, i);
        sum_dyxh += dy * xh;
        sum_gxxh += gx * xh;
        sum_gxdy += gx * dy;
    }
    const float m_dy = (float)(channel_sum(k, c, k->dy) / n);
    const float m_gx = (float)(channel_sum(k, c, k->gx) / n);
    const float m_dyxh = (float)(sum_dyxh / n), m_gxxh = (float)(sum_gxxh / n);
    const float m_gxdy = (float)(sum_gxdy / n);
    const float cov = m_gxdy - m_gx * m_dy;
    d_scale[c] = (r * (float)n) * (cov - m_gxxh * m_dyxh);
    const float kx = cov - (3.0f * m_dyxh) * m_gxxh;
    const float sr = s * r, nsrr = (-s * r) * r, gsr = gs * r;
    BN_FOR_CHANNEL(k, c, i) {
        const float xh = (load1(k, k->x, i) - mu) * r;
        const float dy = load1(k, k->dy, i), gx = load1(k, k->gx, i);
        store1(k, d_dy, i, (sr * ((gx - m_gx) - xh * m_gxxh) + gs * xh) + go);
        store1(k, d_x, i,
               nsrr * ((xh * kx + m_gxxh * (dy - m_dy)) + m_dyxh * (gx - m_gx)) +
                   gsr * ((dy - m_dy) - xh * m_dyxh));
    }
}

/* Inference forward, reference order: y = (x - mean) * factor + offset, factor = scale * r
 * (float32, as chan_coef 1). */
static void exact_forward_inference(const bn_call *k, int64_t c, float mean, float factor,
                                    float offset, char *y)
{
    BN_FOR_CHANNEL(k, c, i)
        store1(k, y, i, (load1(k, k->x, i) - mean) * factor + offset);
}

/* Second order, inference, reference order: d_dy = (gx * (scale * r) + (gscale * (x - mean))
 * * r) + goffset, d_x = (gscale * dy) * r, d_scale = f32(sum(gx * dy)) * r. */
static void exact_grad_grad_inference(const bn_call *k, int64_t c, float s, float mean,
                                      float variance, float gs, float go, double epsilon,
                                      char *d_dy, char *d_x, float *d_scale)
{
    const float r = rsqrt_f32(variance, epsilon), sr = s * r;
    double sum_gxdy = 0.0;
    BN_FOR_CHANNEL(k, c, i) {
        const float dy = load1(k, k->dy, i), gx = load1(k, k->gx, i);
        sum_gxdy += gx * dy;
        store1(k, d_dy, i, (gx * sr + (gs * (load1(k, k->x, i) - mean)) * r) + go);
        store1(k, d_x, i, (gs * dy) * r);
    }
    d_scale[c] = (float)sum_gxdy * r;
}

/* _FusedBatchNormEx's tail on an exceptional channel recomputed above: y = y + side (when
 * given), then Relu (when relu) as mg_relu, element by element as AddV2 and Relu do. */
static void exact_side_relu(const bn_call *k, int64_t c, char *y, const char *side, int relu)
{
    if (!side && !relu)
        return;
    BN_FOR_CHANNEL(k, c, i) {
        float v = load1(k, y, i);
        if (side)
            v = v + load1(k, side, i);
        if (relu)
            v = (v > 0.0f || v != v) ? v : 0.0f;
        store1(k, y, i, v);
    }
}

/* The apply run of a forward: plain, + side input, Relu, or both. */
static int forward_run(const void *side, int relu)
{
    if (side)
        return relu ? BN_FWD_APPLY_SIDE_RELU : BN_FWD_APPLY_SIDE;
    return relu ? BN_FWD_APPLY_RELU : BN_FWD_APPLY;
}

static int bad_args(int dtype, int64_t outer, int64_t channels, int64_t inner)
{
    return dtype < MG_BN_F32 || dtype > MG_BN_BF16 || outer < 0 || channels < 0 || inner < 0;
}

static void fill(float *dst, int64_t n, float value)
{
    for (int64_t i = 0; i < n; ++i)
        dst[i] = value;
}

/* The start every entry point shares: bad arguments -> MG_EINVAL; no channels or no
 * elements -> nothing to stream, the per-channel outputs empty0 and empty1 (where given)
 * filled with `empty` (NaN statistics, zero gradients) -> 0; otherwise the
 * call is set up (call_init) -> BN_CALL_READY. The caller then sets the tensor pointers. */
enum { BN_CALL_READY = -1 };

static int call_begin(bn_call *k, int dtype, int64_t outer, int64_t channels, int64_t inner,
                      int nfields, int num_threads, const void *align_ref, float empty,
                      float *empty0, float *empty1)
{
    if (bad_args(dtype, outer, channels, inner))
        return MG_EINVAL;
    if (channels == 0)
        return 0;
    if (outer == 0 || inner == 0) {
        if (empty0)
            fill(empty0, channels, empty);
        if (empty1)
            fill(empty1, channels, empty);
        return 0;
    }
    const int rc = call_init(k, dtype, outer, channels, inner, nfields, num_threads, align_ref);
    return rc ? rc : BN_CALL_READY;
}

/* ------------------------------------------------------------------------------------------ */
/* Entry points                                                                                */

/* Training forward:
 *   mu = mean(x), var = mean((x - mu)^2) (biased; block-wise two-pass + Chan merge),
 *   y = (x - mu) * (scale * rsqrt(var + eps)) + offset. Empty x: mean = variance = NaN.
 * Exceptional channels (infinities, NaN, |x| near the float32 range) are recomputed as the
 * reference does: mean of a channel holding -inf is -inf, its variance NaN. */
static int forward_exceptional(const bn_call *k, int64_t c, const float *offset)
{
    return beyond(combined(k, 0, c), BN_BIG_VALUE) || beyond(combined(k, 1, c), BN_BIG_SUM) ||
           beyond(chan_coef(k, 1)[c], BN_BIG_VALUE) || vector_beyond(offset, c);
}

int mg_bn_forward_training(int dtype, int64_t outer, int64_t channels, int64_t inner,
                           const void *x, const float *scale, const float *offset,
                           double epsilon, void *y, float *mean, float *variance,
                           int num_threads)
{
    return mg_bn_forward_training_ex(dtype, outer, channels, inner, x, scale, offset, epsilon,
                                     NULL, 0, y, mean, variance, num_threads);
}

int mg_bn_forward_training_ex(int dtype, int64_t outer, int64_t channels, int64_t inner,
                              const void *x, const float *scale, const float *offset,
                              double epsilon, const void *side, int relu, void *y,
                              float *mean, float *variance, int num_threads)
{
    bn_call k;
    const int rc =
        call_begin(&k, dtype, outer, channels, inner, 2, num_threads, y, NAN, mean, variance);
    if (rc != BN_CALL_READY)
        return rc;
    k.x = x;
    k.dy = side;
    k.out0 = y;
    statistics_pass(&k, 1);
    int exceptional = 0;
    for (int64_t c = 0; c < channels; ++c) {
        const float mu = (float)combined(&k, 0, c);
        const float var = (float)(combined(&k, 1, c) / k.counts[c]);
        mean[c] = mu;
        variance[c] = var;
        chan_coef(&k, 0)[c] = mu;
        chan_coef(&k, 1)[c] = scale[c] * rsqrt_f32(var, epsilon);
        chan_coef(&k, 2)[c] = offset[c];
        exceptional |= forward_exceptional(&k, c, offset);
    }
    element_pass(&k, forward_run(side, relu), 3, 0);
    for (int64_t c = 0; exceptional && c < channels; ++c)
        if (forward_exceptional(&k, c, offset)) {
            exact_forward_training(&k, c, scale[c], offset[c], epsilon, y, mean, variance);
            exact_side_relu(&k, c, y, side, relu);
        }
    return 0;
}

/* Inference forward:
 *   y = (x - mean) * (scale * rsqrt(variance + eps)) + offset, one pass. The run evaluates
 *   fma(x - mean, k, offset) with the reference's float32 x - mean and k = scale * r: it
 *   rounds once where the reference rounds the product, then the sum. That only decides an
 *   overflow differently when the offset is large: a product beyond FLT_MAX that a huge
 *   offset of the other sign brings back (reference -inf, run -4.86e36), an infinite offset
 *   meeting a product that overflows to the other infinity (reference NaN, run inf). With
 *   |offset| <= 2^60, far below half an ulp of FLT_MAX (2^103), the rounded and the fused
 *   product overflow alike (short of a product exactly halfway between FLT_MAX and 2^128), and
 *   NaN or infinite means and factors propagate alike through both. So only channels with a
 *   non-finite or huge offset are exceptional, recomputed in the reference's order. */
static int forward_inference_exceptional(int64_t c, const float *offset)
{
    return vector_beyond(offset, c);
}

int mg_bn_forward_inference(int dtype, int64_t outer, int64_t channels, int64_t inner,
                            const void *x, const float *scale, const float *offset,
                            const float *mean, const float *variance, double epsilon,
                            void *y, int num_threads)
{
    return mg_bn_forward_inference_ex(dtype, outer, channels, inner, x, scale, offset, mean,
                                      variance, epsilon, NULL, 0, y, num_threads);
}

int mg_bn_forward_inference_ex(int dtype, int64_t outer, int64_t channels, int64_t inner,
                               const void *x, const float *scale, const float *offset,
                               const float *mean, const float *variance, double epsilon,
                               const void *side, int relu, void *y, int num_threads)
{
    bn_call k;
    const int rc =
        call_begin(&k, dtype, outer, channels, inner, 1, num_threads, y, 0.0f, NULL, NULL);
    if (rc != BN_CALL_READY)
        return rc;
    k.x = x;
    k.dy = side;
    k.out0 = y;
    int exceptional = 0;
    for (int64_t c = 0; c < channels; ++c) {
        chan_coef(&k, 0)[c] = mean[c];
        chan_coef(&k, 1)[c] = scale[c] * rsqrt_f32(variance[c], epsilon);
        chan_coef(&k, 2)[c] = offset[c];
        exceptional |= forward_inference_exceptional(c, offset);
    }
    element_pass(&k, forward_run(side, relu), 3, 0);
    for (int64_t c = 0; exceptional && c < channels; ++c)
        if (forward_inference_exceptional(c, offset)) {
            exact_forward_inference(&k, c, mean[c], chan_coef(&k, 1)[c], offset[c], y);
            exact_side_relu(&k, c, y, side, relu);
        }
    return 0;
}

/* Backward, both modes, with the given mean/variance (float32 per-channel values, in the
 * reference's order):
 *   r = rsqrt(variance + eps), xc = x - mean, S1 = f32(sum(dy)), S2 = f32(sum(dy * xc)),
 *   offset_backprop = S1, scale_backprop = S2 * r,
 *   training:  dx = scale*r*(dy - S1/n - xc * (S2/n) * r^2)   (second pass)
 *   inference: dx = dy * (scale*r)                             (same pass)
 * Empty x: scale_backprop = offset_backprop = 0. */
static int backward_exceptional(const bn_call *k, int64_t c, const float *scale,
                                const float *mean, const float *variance)
{
    return beyond(combined(k, 0, c), BN_BIG_SUM) || beyond(combined(k, 1, c), BN_BIG_SUM) ||
           vector_beyond(mean, c) || beyond(variance[c], BN_BIG_SUM) ||
           vector_beyond(scale, c) || beyond(chan_coef(k, 1)[c], BN_BIG_VALUE) ||
           beyond(chan_coef(k, 2)[c], BN_BIG_VALUE);
}

static int backward(int training, int dtype, int64_t outer, int64_t channels, int64_t inner,
                    const void *dy, const void *dy2, const void *x, const float *scale,
                    const float *mean, const float *variance, const void *relu_y,
                    double epsilon, void *dx, void *side_backprop, float *scale_backprop,
                    float *offset_backprop, int num_threads)
{
    bn_call k;
    const int rc = call_begin(&k, dtype, outer, channels, inner, 2, num_threads, dx, 0.0f,
                              scale_backprop, offset_backprop);
    if (rc != BN_CALL_READY)
        return rc;
    k.x = x;
    k.dy = dy;
    k.gx = relu_y; /* the masked runs read the Relu output through gx */
    k.relu_y = relu_y;
    const float n = (float)((double)outer * (double)inner);
    for (int64_t c = 0; c < channels; ++c) {
        chan_coef(&k, 0)[c] = mean[c];
        chan_coef(&k, 1)[c] = scale[c] * rsqrt_f32(variance[c], epsilon);
    }
    if (dy2) {
        /* the masked sum, stored by the sums pass where the apply pass reads it: the side
         * gradient, else dx itself (the apply pass reads each element before writing it) */
        k.dy2 = dy2;
        k.out1 = side_backprop ? side_backprop : dx;
        element_pass(&k, BN_BWD_SUMS_RELU_ADD, 1, 2);
        k.dy2 = NULL;
    } else if (training) {
        k.out1 = side_backprop; /* the masked dy, stored by the sums pass */
        element_pass(&k, relu_y ? BN_BWD_SUMS_RELU : BN_BWD_SUMS, 1, 2);
    } else {
        k.out0 = dx;
        element_pass(&k, BN_BWD_INFER, 2, 2);
    }
    combine(&k, combine_sums);
    int exceptional = 0;
    for (int64_t c = 0; c < channels; ++c) {
        const float r = rsqrt_f32(variance[c], epsilon);
        const float sum_dy = (float)combined(&k, 0, c), sum_dy_xc = (float)combined(&k, 1, c);
        offset_backprop[c] = sum_dy;
        scale_backprop[c] = sum_dy_xc * r;
        /* dx = k1 * (dy - k3) + k2 * xc */
        chan_coef(&k, 2)[c] = -(chan_coef(&k, 1)[c] * (((sum_dy_xc / n) * r) * r));
        chan_coef(&k, 3)[c] = sum_dy / n;
        exceptional |= backward_exceptional(&k, c, scale, mean, variance);
    }
    if (dy2 && exceptional) /* recomputed from the sum, which no buffer holds: the caller's */
        return MG_BN_UNFUSED;
    if (training) {
        /* dx from the stored masked dy where there is one (the same g, one read less) */
        const void *dy_in = k.dy;
        const int masked = relu_y && !side_backprop && !dy2;
        if (side_backprop || dy2)
            k.dy = k.out1;
        k.out0 = dx;
        k.out1 = NULL;
        element_pass(&k, masked ? BN_BWD_APPLY_RELU : BN_BWD_APPLY, 4, 0);
        k.dy = dy_in;
    }
    for (int64_t c = 0; exceptional && c < channels; ++c)
        if (backward_exceptional(&k, c, scale, mean, variance))
            exact_backward(&k, c, training, scale[c], mean[c], variance[c], epsilon, dx,
                           scale_backprop, offset_backprop);
    return 0;
}

int mg_bn_backward_training(int dtype, int64_t outer, int64_t channels, int64_t inner,
                            const void *dy, const void *x, const float *scale,
                            const float *mean, const float *variance, double epsilon,
                            void *dx, float *scale_backprop, float *offset_backprop,
                            int num_threads)
{
    return backward(1, dtype, outer, channels, inner, dy, NULL, x, scale, mean, variance, NULL,
                    epsilon,
                    dx, NULL, scale_backprop, offset_backprop, num_threads);
}

int mg_bn_backward_inference(int dtype, int64_t outer, int64_t channels, int64_t inner,
                             const void *dy, const void *x, const float *scale,
                             const float *mean, const float *variance, double epsilon,
                             void *dx, float *scale_backprop, float *offset_backprop,
                             int num_threads)
{
    return backward(0, dtype, outer, channels, inner, dy, NULL, x, scale, mean, variance, NULL,
                    epsilon,
                    dx, NULL, scale_backprop, offset_backprop, num_threads);
}

/* _FusedBatchNormGradEx (training): the backward of dy masked by the forward's Relu output
 * y, g = y > 0 ? dy : dy * 0 (ReluGrad), bit for bit ReluGrad then the backward above; g is
 * also stored to side_backprop when given (the side input's gradient). Inference-mode
 * gradients and other dtypes are the caller's composition of the unfused kernels. */
int mg_bn_backward_training_ex(int dtype, int64_t outer, int64_t channels, int64_t inner,
                               const void *dy, const void *x, const float *scale,
                               const float *mean, const float *variance, const void *y,
                               double epsilon, void *dx, void *side_backprop,
                               float *scale_backprop, float *offset_backprop, int num_threads)
{
    if (!y)
        return MG_EINVAL;
    return backward(1, dtype, outer, channels, inner, dy, NULL, x, scale, mean, variance, y,
                    epsilon, dx, side_backprop, scale_backprop, offset_backprop, num_threads);
}

/* _FusedBatchNormGradEx with an addend: mg_bn_backward_training_ex of dy + dy2 (AddN of the
 * two, float32, in that order, rounded once) without AddN's pass over memory: the sums pass
 * reads both and stores the masked sum (to side_backprop when given, else to dx), the apply
 * pass reads it back. Float32 only. A channel that needs the exceptional recomputation
 * (non-finite or huge values, see above) returns MG_BN_UNFUSED before dx is written: the
 * caller then adds the two and calls mg_bn_backward_training_ex (the outputs hold nothing
 * meaningful until then). */
int mg_bn_backward_training_ex_add(int dtype, int64_t outer, int64_t channels, int64_t inner,
                                   const void *dy, const void *dy2, const void *x,
                                   const float *scale, const float *mean, const float *variance,
                                   const void *y, double epsilon, void *dx,
                                   void *side_backprop, float *scale_backprop,
                                   float *offset_backprop, int num_threads)
{
    if (!y || !dy2 || dtype != MG_BN_F32)
        return MG_EINVAL;
    return backward(1, dtype, outer, channels, inner, dy, dy2, x, scale, mean, variance, y,
                    epsilon, dx, side_backprop, scale_backprop, offset_backprop, num_threads);
}

/* Second order, training: the gradient of (dx, scale_backprop, offset_backprop) of the
 * training backward, whose statistics come from x, against the cotangents (gx, gscale,
 * goffset). With mu, var (biased) recomputed from x, r = rsqrt(var + eps),
 * xh = (x - mu) * r and per-channel means mdy, mgx, mdyxh = mean(dy*xh),
 * mgxxh = mean(gx*xh), cov = mean((gx - mgx) * (dy - mdy)):
 *   d_dy    = scale*r*(gx - mgx - xh*mgxxh) + gscale*xh + goffset
 *   d_scale = r * n * (cov - mgxxh*mdyxh)          ( = r * sum(gx * (dy - mdy - xh*mdyxh)) )
 *   d_x     = -scale*r^2*(xh*(cov - 3*mdyxh*mgxxh) + mgxxh*(dy - mdy) + mdyxh*(gx - mgx))
 *             + gscale*r*(dy - mdy - xh*mdyxh)
 * The first pass gathers centered (co)moments of x, dy, gx per block; the second pass
 * evaluates both tensors centered at the means: d_dy = k3*gc + k4*xc + k5,
 * d_x = k6*xc + k7*dc + k8*gc (xc = x - mu, dc = dy - mdy, gc = gx - mgx). Exceptional
 * channels (see above) follow the reference's uncentered formulas instead. */
static int grad_grad_training_exceptional(const bn_call *k, int64_t c, const float *scale,
                                          const float *gscale, const float *goffset)
{
    int out = vector_beyond(scale, c) || vector_beyond(gscale, c) || vector_beyond(goffset, c);
    for (int v = 0; v < 3; ++v)
        out |= beyond(combined(k, v, c), BN_BIG_VALUE);
    for (int q = 3; q < 7; ++q)
        out |= beyond(combined(k, q, c), BN_BIG_SUM);
    for (int i = 3; i < 9; ++i)
        out |= beyond(chan_coef(k, i)[c], BN_BIG_VALUE);
    return out;
}

int mg_bn_grad_grad_training(int dtype, int64_t outer, int64_t channels, int64_t inner,
                             const void *dy, const void *x, const float *scale,
                             const void *gx, const float *gscale, const float *goffset,
                             double epsilon, void *d_dy, void *d_x, float *d_scale,
                             int num_threads)
{
    bn_call k;
    const int rc =
        call_begin(&k, dtype, outer, channels, inner, 7, num_threads, d_dy, 0.0f, d_scale, NULL);
    if (rc != BN_CALL_READY)
        return rc;
    k.x = x;
    k.dy = dy;
    k.gx = gx;
    statistics_pass(&k, 3);
    int exceptional = 0;
    for (int64_t c = 0; c < channels; ++c) {
        const double n = k.counts[c], s = scale[c], gs = gscale[c];
        const double var = combined(&k, 3, c) / n, r = 1.0 / sqrt(var + epsilon), r2 = r * r;
        const double mdyxh = r * combined(&k, 4, c) / n, mgxxh = r * combined(&k, 5, c) / n;
        const double cov = combined(&k, 6, c) / n;
        d_scale[c] = (float)(r * n * (cov - mgxxh * mdyxh));
        chan_coef(&k, 0)[c] = (float)combined(&k, 0, c);
        chan_coef(&k, 1)[c] = (float)combined(&k, 1, c);
        chan_coef(&k, 2)[c] = (float)combined(&k, 2, c);
        chan_coef(&k, 3)[c] = (float)(s * r);
        chan_coef(&k, 4)[c] = (float)(gs * r - s * r2 * mgxxh);
        chan_coef(&k, 5)[c] = goffset[c];
        chan_coef(&k, 6)[c] = (float)(-s * r2 * r * (cov - 3.0 * mdyxh * mgxxh) - gs * r2 * mdyxh);
        chan_coef(&k, 7)[c] = (float)(gs * r - s * r2 * mgxxh);
        chan_coef(&k, 8)[c] = (float)(-s * r2 * mdyxh);
        exceptional |= grad_grad_training_exceptional(&k, c, scale, gscale, goffset);
    }
    k.out0 = d_dy;
    k.out1 = d_x;
    element_pass(&k, BN_GG_APPLY, 9, 0);
    for (int64_t c = 0; exceptional && c < channels; ++c)
        if (grad_grad_training_exceptional(&k, c, scale, gscale, goffset))
            exact_grad_grad_training(&k, c, scale[c], gscale[c], goffset[c], epsilon, d_dy, d_x,
                                     d_scale);
    return 0;
}

/* Second order, inference, one pass with the given mean/variance (float32 factors, as the
 * reference): r = rsqrt(variance + eps); d_dy = (gx*(scale*r) + (gscale*(x - mean))*r) + goffset;
 * d_x = (gscale*dy)*r; d_scale = f32(sum(gx*dy)) * r. The run evaluates the element outputs
 * in the reference's order, operation by operation and unfused (bit-identical): with huge
 * tensors, gscale*(x - mean) or gscale*dy overflows where (gscale*r)*(x - mean) need not,
 * and no per-channel test can tell, the magnitudes of x and dy being unknown here. Exceptional
 * channels (huge or non-finite per-channel inputs and sums) are recomputed as before. */
static int grad_grad_inference_exceptional(const bn_call *k, int64_t c, const float *scale,
                                           const float *mean, const float *variance,
                                           const float *gscale, const float *goffset)
{
    return beyond(combined(k, 0, c), BN_BIG_SUM) || vector_beyond(scale, c) ||
           vector_beyond(mean, c) || beyond(variance[c], BN_BIG_SUM) ||
           vector_beyond(gscale, c) || vector_beyond(goffset, c) ||
           beyond(chan_coef(k, 1)[c], BN_BIG_VALUE) || beyond(chan_coef(k, 2)[c], BN_BIG_VALUE);
}

int mg_bn_grad_grad_inference(int dtype, int64_t outer, int64_t channels, int64_t inner,
                              const void *dy, const void *x, const float *scale,
                              const float *mean, const float *variance,
                              const void *gx, const float *gscale, const float *goffset,
                              double epsilon, void *d_dy, void *d_x, float *d_scale,
                              int num_threads)
{
    bn_call k;
    const int rc =
        call_begin(&k, dtype, outer, channels, inner, 1, num_threads, d_dy, 0.0f, d_scale, NULL);
    if (rc != BN_CALL_READY)
        return rc;
    k.x = x;
    k.dy = dy;
    k.gx = gx;
    k.out0 = d_dy;
    k.out1 = d_x;
    for (int64_t c = 0; c < channels; ++c) {
        const float r = rsqrt_f32(variance[c], epsilon);
        chan_coef(&k, 0)[c] = mean[c];
        chan_coef(&k, 1)[c] = scale[c] * r;
        chan_coef(&k, 2)[c] = gscale[c];
        chan_coef(&k, 3)[c] = goffset[c];
        chan_coef(&k, 4)[c] = r;
    }
    element_pass(&k, BN_GG_INFER, 5, 1);
    combine(&k, combine_sums);
    for (int64_t c = 0; c < channels; ++c) {
        d_scale[c] = (float)combined(&k, 0, c) * rsqrt_f32(variance[c], epsilon);
        if (grad_grad_inference_exceptional(&k, c, scale, mean, variance, gscale, goffset))
            exact_grad_grad_inference(&k, c, scale[c], mean[c], variance[c], gscale[c],
                                      goffset[c], epsilon, d_dy, d_x, d_scale);
    }
    return 0;
}

/* backward.c: clembed_backward and clembed_sgd_update.
 *
 * What is computed, in this order of float32 operations, for every table row v
 * and column c (tokens i in ascending order; m_i = grad_out[i][c] as float32,
 * or with dropout m_i = g * keep when the forward kept element i*cols + c and
 * exactly 0.0f when it dropped it, keep = 1.0f / (1.0f - dropout) computed on
 * the host in float as the forward does):
 *     S = 0.0f;  S = S + m_i  for each token i whose id resolves to v
 *     r = scale * S;   r = r / (float)count_v   (scale_grad_by_freq only)
 *     backward: grad_table[v][c] = r (accumulate 0) or grad_table[v][c] + r (1)
 *     sgd:      table[v][c] = round_to_dtype(table[v][c] - learning_rate * r)
 * count_v is the number of tokens of this call whose id resolves to v (after
 * the policy: with WRAP, -1 and rows-1 count together; with CLAMP, clamped ids
 * count for the row they go to). The padding row, dropped ids (ZERO) and bad
 * ids (CHECK, and WRAP beyond -rows; reported as a deferred
 * CLEMBED_ERR_INDEX_OUT_OF_RANGE) add nothing. No FP contraction anywhere.
 * With position_grad: position_grad[p][c] = position_grad[p][c] + S_p, where
 * S_p folds m_i (dropout-masked, not scaled: the forward does not scale the
 * positional part) over the tokens at position p in ascending token order;
 * every token counts, padding and bad ids included (the forward adds their
 * positional part). A position outside [0, position_grad->rows) is a deferred
 * error and adds nothing.
 *
 * Deterministic path (the default), as PyTorch's EmbeddingBackwardKernel.cu:
 *   1. ce_bwd_keys: key[i] = resolved row (or `none` = rows, sorting last),
 *      idx[i] = i; reports bad ids into the operation's error slot.
 *   2. a stable LSD radix sort of (key, idx), 8 bits a pass, as many passes as
 *      the bit width of `rows` needs (2 for a 32,000-row vocabulary); each pass
 *      is three launches: ce_bwd_hist (one work-item per chunk of 64 or more
 *      consecutive entries: 256-bin digit histogram), ce_bwd_scan (exclusive
 *      scan of the digit-major histograms in one work-group), ce_bwd_scatter
 *      (each chunk writes its entries in order: stable).
 *   3. ce_bwd_rows: each segment of equal keys (one table row) is folded in
 *      sorted = ascending token order and its row written once (no atomics).
 *      Work-item (x, y) takes the segments starting at sorted positions
 *      slice, slice + 2^k, ... and a range of columns. On a GPU a work-item
 *      folds VEC = 4 columns and consecutive work-items take consecutive
 *      columns of a gradient row (256-column blocks, one block per
 *      work-group). With the CPU shapes a work-item takes groups of 4 sorted
 *      positions and folds the short segments that start there side by side,
 *      TILE x VEC = 4 x 16 columns at a time over their whole rows (several
 *      gradient and table rows streaming at once; whole rows: 2x faster than
 *      256-column pieces), in work-groups of up to 16 items so that the
 *      compute units share the work evenly. A segment is a strict left
 *      fold, so a long one (one id repeated 20,000 times) is never split over
 *      its tokens (a split and recombined sum would change the bits); from 64
 *      tokens up (always, on a GPU) it is split over 256-column blocks that
 *      go to different work-groups, so it stays parallel over its columns,
 *      which is enough for d in the usual 512..4096.
 *   4. with position_grad: the same with ce_bwd_pos_keys and ce_bwd_pos.
 * So the result is bit-identical from run to run, whatever the local size or
 * the number of compute units, and equals the sequential float32 sum above.
 * Launches: 1 + 3 * passes + 1 (+ 1 to zero grad_table with accumulate 0,
 * + 1 to record a deferred error; the same again for position_grad): 8 for
 * V = 32,000. Temporaries (created per call, released after enqueueing; OpenCL
 * frees them when the commands finish): keys 2 x n (4 or 8 bytes), indices
 * 2 x n x 4 bytes, histograms 256 x ceil(n / chunk) x 4 bytes with at most
 * 4096 chunks: O(ids), never O(vocabulary). Measured on POCL (2-core CPU),
 * n = 16384, d = 1024, V = 32000, accumulate 1: 0.66..0.9 of the bench's copy
 * kernel moving the same bytes (ids + gradient + touched rows read and
 * written), about 7 ms, of which the sort is under 1 ms.
 *
 * Atomic path (deterministic = 0, clembed_backward only, never the default):
 * one launch, ce_bwd_atomic, where each (token, column) adds
 * (scale * m_i) / count_v into grad_table with a compare-and-swap loop on the
 * 32-bit word (OpenCL 1.2 atomic_cmpxchg; no float atomics needed). The order
 * of the additions, and so the last bits, vary from run to run. It skips the
 * sort, so on a GPU it is faster when ids repeat little (no contention on a
 * word) and the vocabulary is huge (more radix passes) or n is small (the
 * sort's fixed launches dominate); with many repeats of one id the CAS loops
 * on the same words serialise and retry, and the sorted path wins. On a CPU it
 * is never faster (a scalar CAS per element: about 8x slower on POCL for the
 * case above). accumulate = 0 zeroes grad_table first; scale_grad_by_freq
 * counts rows with atomic_inc into a temporary of rows x 4 bytes
 * (O(vocabulary), like grad_table itself).
 * position_grad is always summed by the deterministic path.
 *
 * clembed_sgd_update always uses the deterministic path, with the fused
 * ce_bwd_rows (MODE 2): it reads and writes only the rows that occur in ids,
 * needs O(ids) memory, and materialises no gradient. The table may be F32,
 * F16 or BF16 (read, updated in float32, written back rounded to nearest
 * even). If opt->position_grad is set, it is accumulated as in
 * clembed_backward (the position table's step is the caller's). */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

clembed_backward_options clembed_backward_defaults(void) {
  clembed_backward_options o = {0};
  o.scale = 1.0f;
  o.policy = CLEMBED_INDEX_CHECK;
  o.padding_idx = CLEMBED_NO_PADDING;
  o.scale_grad_by_freq = 0;
  o.deterministic = 1;
  o.accumulate = 1;
  return o;
}

/* Radix sort tuning: a chunk (one work-item) covers at least BW_CHUNK entries,
 * and there are at most BW_MAX_CHUNKS chunks (the scan is one work-group). */
#define BW_CHUNK 64
#define BW_MAX_CHUNKS 4096
#define BW_RADIX_BITS 8
/* Columns of one column block of the segment kernels (a work-group's width). */
#define BW_BLOCK_COLUMNS 256
/* Work-items across a row for the kernels that loop over a row's columns (or a
 * sequence's tokens): a fixed width, so the work-group shape (and POCL's
 * compiled work-group function) does not change with the size. */
#define BW_ROW_ITEMS 256

/* The commands of one call, in order. On an in-order queue each command waits
 * on the caller's list (already satisfied after the first); on an out-of-order
 * queue each waits on the previous command's event. The last command of the
 * call is enqueued with ce_enqueue_checked (or a marker), which gives the
 * caller's event. */
typedef struct bw_chain {
  clembed_context *ctx;
  cl_uint nwait;
  const cl_event *wait;
  cl_event prev;
} bw_chain;

static cl_uint ch_n(const bw_chain *ch) { return ch->prev ? 1u : ch->nwait; }
static const cl_event *ch_w(const bw_chain *ch) { return ch->prev ? &ch->prev : ch->wait; }
static cl_event *ch_ev(bw_chain *ch, cl_event *slot) {
  *slot = NULL;
  return ch->ctx->in_order ? NULL : slot;
}
static void ch_next(bw_chain *ch, cl_event ev) {
  if (!ev) return;
  if (ch->prev) clReleaseEvent(ch->prev);
  ch->prev = ev;
}

typedef struct bw_call {
  clembed_context *ctx;
  bw_chain ch;
  char opts[256];
  cl_uint slot;
  const clembed_ids *ids, *so;
  size_t seq_len;
  cl_event *event; /* the caller's */
  int key64;
} bw_call;

static clembed_status step_1d(bw_call *b, cl_kernel k, const char *name, size_t n, size_t local) {
  cl_event ev;
  clembed_status s = ce_enqueue_1d(b->ctx, k, name, n, local, ch_n(&b->ch), ch_w(&b->ch), ch_ev(&b->ch, &ev));
  ch_next(&b->ch, ev);
  return s;
}

/* A 2-D launch; the last one of the call records the deferred error and gives
 * the caller's event. */
static clembed_status step_2d(bw_call *b, cl_kernel k, const char *name, size_t nx, size_t ny, int last) {
  if (last)
    return ce_enqueue_checked(b->ctx, k, name, 0, nx, ny, CE_FAMILY_BACKWARD, b->opts, b->slot, b->ids, b->so,
                              b->seq_len, ch_n(&b->ch), ch_w(&b->ch), b->event);
  cl_event ev;
  clembed_status s = ce_enqueue_2d(b->ctx, k, name, nx, ny, ch_n(&b->ch), ch_w(&b->ch), ch_ev(&b->ch, &ev));
  ch_next(&b->ch, ev);
  return s;
}

/* A 1-D local size of `want` when the kernel allows it, else the default. */
static size_t local_for(clembed_context *ctx, cl_kernel k, size_t want) {
  size_t wg = 0;
  if (clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL) != CL_SUCCESS)
    return 0;
  return wg >= want ? want : 0;
}

/* A temporary of `bytes`. Every temporary is written by a kernel before it is
 * read, so its contents do not matter; on Oclgrind it is created from zeroed
 * host memory all the same, because Oclgrind 21.10's uninitialised-value
 * checker keeps the shadow state of a released buffer for the next buffer that
 * gets its id (and so reports reads of a reused, smaller-shadowed id). */
static clembed_status new_temp(clembed_context *ctx, size_t bytes, const char *what, cl_mem *out) {
  cl_int err;
  if (bytes == 0) bytes = 4;
  if (ctx->max_alloc && bytes > ctx->max_alloc)
    return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "%s: %zu bytes exceed the device's largest allocation (%llu)",
                   what, bytes, (unsigned long long)ctx->max_alloc);
  void *zero = NULL;
  if (strstr(ctx->device_name, "Oclgrind")) {
    zero = calloc(1, bytes);
    if (!zero) return ce_fail(ctx, CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", what);
  }
  *out = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE | (zero ? CL_MEM_COPY_HOST_PTR : 0), bytes, zero, &err);
  free(zero);
  if (err != CL_SUCCESS) {
    *out = NULL;
    return ce_fail(ctx, err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES ||
                                err == CL_OUT_OF_HOST_MEMORY
                            ? CLEMBED_ERR_OUT_OF_MEMORY
                            : (clembed_status)err,
                   "%s: allocating %zu bytes: %s", what, bytes, clembed_status_string((clembed_status)err));
  }
  return CLEMBED_OK;
}

/* The sort's temporaries: keys and indices twice (ping-pong) and the histograms. */
typedef struct bw_sort {
  cl_mem keys[2], idx[2], hist;
  size_t n, chunk, nchunks;
} bw_sort;

static clembed_status sort_alloc(clembed_context *ctx, size_t n, size_t key_bytes, bw_sort *s) {
  clembed_status status = CLEMBED_OK;
  memset(s, 0, sizeof *s);
  s->n = n;
  s->chunk = BW_CHUNK;
  s->nchunks = (n + s->chunk - 1) / s->chunk;
  if (s->nchunks > BW_MAX_CHUNKS) {
    s->chunk = (n + BW_MAX_CHUNKS - 1) / BW_MAX_CHUNKS;
    s->nchunks = (n + s->chunk - 1) / s->chunk;
  }
  for (int i = 0; i < 2; i++) {
    CHECK(new_temp(ctx, n * key_bytes, "backward: sort keys", &s->keys[i]));
    CHECK(new_temp(ctx, n * sizeof(cl_uint), "backward: sort indices", &s->idx[i]));
  }
  CHECK(new_temp(ctx, (size_t)(1u << BW_RADIX_BITS) * s->nchunks * sizeof(cl_uint), "backward: sort histograms",
                 &s->hist));
cleanup:
  return status;
}

static void sort_release(bw_sort *s) {
  for (int i = 0; i < 2; i++) {
    if (s->keys[i]) clReleaseMemObject(s->keys[i]);
    if (s->idx[i]) clReleaseMemObject(s->idx[i]);
  }
  if (s->hist) clReleaseMemObject(s->hist);
  memset(s, 0, sizeof *s);
}

/* Sorts (keys[0], idx[0]) stably by key < 2^bits; *which receives the buffer
 * pair that holds the result. */
static clembed_status sort_run(bw_call *b, bw_sort *s, unsigned bits, int *which) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = b->ctx;
  cl_kernel kh, ks, kc;
  CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b->opts, "ce_bwd_hist", &kh));
  CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b->opts, "ce_bwd_scan", &ks));
  CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b->opts, "ce_bwd_scatter", &kc));
  unsigned passes = (bits + BW_RADIX_BITS - 1) / BW_RADIX_BITS;
  if (passes == 0) passes = 1;
  cl_ulong n = s->n, chunk = s->chunk;
  cl_uint nchunks = (cl_uint)s->nchunks, m = (cl_uint)(s->nchunks << BW_RADIX_BITS);
  size_t local = local_for(ctx, kh, 64);
  int cur = 0;
  for (unsigned p = 0; p < passes; p++) {
    cl_uint shift = p * BW_RADIX_BITS;
    CHECK(ce_set_args(ctx, kh, "ce_bwd_hist", CE_ARG(s->keys[cur]), CE_ARG(n), CE_ARG(chunk), CE_ARG(nchunks),
                      CE_ARG(shift), CE_ARG(s->hist), CE_END));
    CHECK(step_1d(b, kh, "ce_bwd_hist", s->nchunks, local));
    CHECK(ce_set_args(ctx, ks, "ce_bwd_scan", CE_ARG(s->hist), CE_ARG(m), CE_END));
    CHECK(step_1d(b, ks, "ce_bwd_scan", 1, 0));
    CHECK(ce_set_args(ctx, kc, "ce_bwd_scatter", CE_ARG(s->keys[cur]), CE_ARG(s->idx[cur]), CE_ARG(n),
                      CE_ARG(chunk), CE_ARG(nchunks), CE_ARG(shift), CE_ARG(s->hist), CE_ARG(s->keys[1 - cur]),
                      CE_ARG(s->idx[1 - cur]), CE_END));
    CHECK(step_1d(b, kc, "ce_bwd_scatter", s->nchunks, local));
    cur = 1 - cur;
  }
  *which = cur;
cleanup:
  return status;
}

static unsigned bit_width(uint64_t v) {
  unsigned b = 0;
  while (v) {
    b++;
    v >>= 1;
  }
  return b;
}

/* The shape of a segment kernel's range (see CE_SEGMENTS and CE_GROUPS in
 * backward.cl): nx = work-items across a column block (a power of two, so the
 * launch does not round it), bw = a block's width in columns, ny = blocks *
 * 2^slice_bits, and split = the segment length from which a segment is split
 * into blocks. On a GPU a block is 256 columns, one VEC (4) per work-item, and
 * every segment is split. With the CPU shapes a work-item (VEC = 16) takes
 * groups of BW_CPU_GROUP sorted positions and reads whole rows of segments
 * shorter than BW_CPU_SPLIT tokens, which keeps its reads sequential (2x
 * faster than 256-column pieces on POCL), and 256-column blocks of longer
 * ones. Slices: enough for about 16 work-groups of 256 items per compute unit,
 * but no more than the positions (or groups of them) to start from. */
#define BW_CPU_SPLIT 64
#define BW_CPU_GROUP 4 /* CE_GROUP in backward.cl */
typedef struct bw_grid {
  size_t nx, ny;
  cl_ulong bw, split;
  cl_uint slice_bits;
} bw_grid;

static bw_grid segment_grid(clembed_context *ctx, size_t cols, size_t n, unsigned vec, int cpu) {
  bw_grid g;
  cl_uint cu = ctx->units;
  size_t items = (cols + vec - 1) / vec, bx = 1;
  while (!cpu && bx < items && bx * 2 <= BW_BLOCK_COLUMNS / vec) bx *= 2;
  g.bw = cpu ? BW_BLOCK_COLUMNS : bx * vec;
  g.split = cpu ? BW_CPU_SPLIT : 1;
  size_t blocks = (cols + g.bw - 1) / g.bw;
  if (blocks == 0) blocks = 1;
  /* the items that share the ordinary segments: bx per slice (block 0 on a CPU) */
  size_t sharing = cpu ? bx : bx * blocks;
  /* at most ~n slices (CPU: groups of positions), but at least 256 (on a GPU the
   * work-group shape is then the same for every n) */
  size_t want = ((size_t)cu * 16 * 256 + sharing - 1) / sharing, slices = 1;
  size_t starts = cpu ? n / BW_CPU_GROUP + (n % BW_CPU_GROUP != 0) : n; /* a CPU item takes groups of positions */
  if (want > starts) want = starts;
  if (want < 256) want = 256;
  g.slice_bits = 0;
  while (slices < want) {
    slices *= 2;
    g.slice_bits++;
  }
  g.nx = bx;
  g.ny = blocks * slices;
  return g;
}

static clembed_status run(clembed_context *ctx, const char *what, int sgd, const clembed_matrix *grad_out,
                          const clembed_ids *ids, float lr, const clembed_backward_options *opt,
                          clembed_matrix *target, cl_uint nwait, const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  clembed_backward_options defaults;
  bw_call b;
  bw_sort srt;
  cl_mem counts = NULL;
  size_t g_ld, t_ld, p_ld = 0;
  cl_long padding;
  memset(&b, 0, sizeof b);
  memset(&srt, 0, sizeof srt);
  if (!opt) {
    defaults = clembed_backward_defaults();
    opt = &defaults;
  }
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_matrix(ctx, grad_out, "grad_out", &g_ld));
  CHECK(ce_check_ids(ctx, ids, "ids"));
  CHECK(ce_check_matrix(ctx, target, sgd ? "table" : "grad_table", &t_ld));
  if (grad_out->rows != ids->count || grad_out->cols != target->cols)
    FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "%s: grad_out is %zu x %zu but %zu ids of a %s with %zu cols need %zu x %zu",
         what, grad_out->rows, grad_out->cols, ids->count, sgd ? "table" : "grad_table", target->cols, ids->count,
         target->cols);
  if (!sgd && target->dtype != CLEMBED_F32)
    FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "%s: grad_table must be F32 (dtype %d)", what, (int)target->dtype);
  if ((uint64_t)ids->count >= 0xFFFFFFFFu)
    FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "%s: %zu ids; at most 4294967294 per call", what, ids->count);
  CHECK(ce_check_common(ctx, what, opt->policy, opt->dropout, ids->count, opt->seq_len, opt->sequence_offsets));
  CHECK(ce_padding(ctx, opt->padding_idx, target->rows, what, &padding));
  const clembed_matrix *pg = opt->position_grad;
  if (pg) {
    CHECK(ce_check_matrix(ctx, pg, "position_grad", &p_ld));
    if (pg->dtype != CLEMBED_F32)
      FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "%s: position_grad must be F32 (dtype %d)", what, (int)pg->dtype);
    if (pg->cols != target->cols)
      FAIL(CLEMBED_ERR_INVALID_ARGUMENT, "%s: position_grad has %zu cols but the %s has %zu", what, pg->cols,
           sgd ? "table" : "grad_table", target->cols);
  }

  size_t n = ids->count, cols = target->cols, rows = target->rows, p_rows = pg ? pg->rows : 0;
  int atomic = !sgd && !opt->deterministic, overwrite = !sgd && !opt->accumulate;
  int dropout = opt->dropout > 0.0f, freq = opt->scale_grad_by_freq != 0;
  cl_int mode = sgd ? 2 : overwrite ? 0 : 1; /* a kernel argument: one program for all three */
  /* Keys hold rows (or positions) and their `none` value, rows itself. */
  b.key64 = (uint64_t)rows > 0xFFFFFFFFu || (uint64_t)p_rows > 0xFFFFFFFFu;
  int cpu = ctx->cpu_shapes;
  /* CPU: 16 columns a vector, 4 vectors folded at once (measured on POCL). */
  unsigned vec = cpu ? 16 : 4, tile = cpu ? 4 : 1;
  /* Exact (correctly rounded) division for scale_grad_by_freq where the device can. */
  const char *div = ctx->exact_div ? " -cl-fp32-correctly-rounded-divide-sqrt" : "";
  snprintf(b.opts, sizeof b.opts, "-DGRAD_DT=%d -DTABLE_DT=%d -DDROPOUT=%d -DKEY64=%d -DVEC=%u -DTILE=%u%s",
           (int)grad_out->dtype, (int)target->dtype, dropout, b.key64, vec, tile, div);
  b.ctx = ctx;
  b.ch.ctx = ctx;
  b.ch.nwait = nwait;
  b.ch.wait = wait;
  b.ids = ids;
  b.so = pg ? opt->sequence_offsets : NULL;
  b.seq_len = opt->seq_len;
  b.event = event;
  b.slot = CE_NO_SLOT;

  int token_work = n > 0 && cols > 0;
  /* CHECK and WRAP report bad ids; CLAMP has nowhere to send an id of an empty table. */
  if (token_work && (opt->policy == CLEMBED_INDEX_CHECK || opt->policy == CLEMBED_INDEX_WRAP ||
                     (opt->policy == CLEMBED_INDEX_CLAMP && rows == 0) || pg)) {
    ce_slot_info info = {what, "position_grad", opt->policy == CLEMBED_INDEX_WRAP, rows, p_rows, opt->seq_len,
                         opt->position_offset, b.so != NULL};
    CHECK(ce_slot_reserve(ctx, &info, &b.slot));
  }

  cl_mem none_mem = NULL, idb = ids->buffer;
  cl_ulong id_off = ids->offset, nl = n, rows_l = rows, colsl = cols;
  cl_ulong g_off = grad_out->offset, g_ldl = g_ld, t_off = target->offset, t_ldl = t_ld;
  cl_int id64 = ids->type == CLEMBED_I64, policy = (cl_int)opt->policy, freq_i = freq;
  cl_float scale = opt->scale, drop = opt->dropout, keep = dropout ? 1.0f / (1.0f - opt->dropout) : 1.0f;
  cl_float lr_f = lr;
  cl_uint seed_lo = (cl_uint)opt->dropout_seed, seed_hi = (cl_uint)(opt->dropout_seed >> 32);
  cl_uint slot_arg = b.slot == CE_NO_SLOT ? 0 : b.slot;
  cl_kernel k;

  /* accumulate = 0: every row becomes 0 first (the rows kernel then overwrites the touched ones). */
  if (overwrite && rows > 0 && cols > 0) {
    CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b.opts, "ce_bwd_zero", &k));
    CHECK(ce_set_args(ctx, k, "ce_bwd_zero", CE_ARG(target->buffer), CE_ARG(t_off), CE_ARG(t_ldl), CE_ARG(rows_l),
                      CE_ARG(colsl), CE_END));
    CHECK(step_2d(&b, k, "ce_bwd_zero", BW_ROW_ITEMS, rows, !token_work));
  }
  if (!token_work) {
    if (!(overwrite && rows > 0 && cols > 0) && event) {
      cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, ch_n(&b.ch), ch_w(&b.ch), event);
      if (err != CL_SUCCESS) {
        status = ce_cl_fail(ctx, err, what);
        goto cleanup;
      }
    }
    goto cleanup;
  }

  size_t key_bytes = b.key64 ? sizeof(cl_ulong) : sizeof(cl_uint);
  bw_grid grid = segment_grid(ctx, cols, n, vec, cpu);
  cl_uint none32 = 0;
  cl_ulong none64 = 0;
  if (!atomic || pg) CHECK(sort_alloc(ctx, n, key_bytes, &srt));

  if (atomic) {
    if (freq) {
      CHECK(new_temp(ctx, rows * sizeof(cl_uint), "backward: row counts", &counts));
      /* Zeroed by ce_bwd_zero (0.0f has the bits of 0u) as a 1 x rows matrix. */
      cl_ulong zero_off = 0, one = 1;
      CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b.opts, "ce_bwd_zero", &k));
      CHECK(ce_set_args(ctx, k, "ce_bwd_zero", CE_ARG(counts), CE_ARG(zero_off), CE_ARG(rows_l), CE_ARG(one),
                        CE_ARG(rows_l), CE_END));
      CHECK(step_2d(&b, k, "ce_bwd_zero", BW_ROW_ITEMS, rows ? 1 : 0, 0));
      CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b.opts, "ce_bwd_count", &k));
      CHECK(ce_set_args(ctx, k, "ce_bwd_count", CE_ARG(idb), CE_ARG(idb), CE_ARG(id_off), CE_ARG(id64), CE_ARG(nl),
                        CE_ARG(rows_l), CE_ARG(policy), CE_ARG(padding), CE_ARG(counts), CE_END));
      CHECK(step_1d(&b, k, "ce_bwd_count", n, 0));
    }
    cl_mem cnt = counts ? counts : none_mem;
    CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b.opts, "ce_bwd_atomic", &k));
    CHECK(ce_set_args(ctx, k, "ce_bwd_atomic", CE_ARG(grad_out->buffer), CE_ARG(g_off), CE_ARG(g_ldl),
                      CE_ARG(colsl), CE_ARG(idb), CE_ARG(idb), CE_ARG(id_off), CE_ARG(id64), CE_ARG(nl),
                      CE_ARG(rows_l), CE_ARG(policy), CE_ARG(padding), CE_ARG(scale), CE_ARG(freq_i), CE_ARG(cnt),
                      CE_ARG(target->buffer), CE_ARG(t_off), CE_ARG(t_ldl), CE_ARG(drop), CE_ARG(seed_lo),
                      CE_ARG(seed_hi), CE_ARG(keep), CE_ARG(ctx->errbuf), CE_ARG(slot_arg), CE_END));
    CHECK(step_2d(&b, k, "ce_bwd_atomic", BW_ROW_ITEMS, n, !pg));
  } else {
    int which;
    CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b.opts, "ce_bwd_keys", &k));
    CHECK(ce_set_args(ctx, k, "ce_bwd_keys", CE_ARG(idb), CE_ARG(idb), CE_ARG(id_off), CE_ARG(id64), CE_ARG(nl),
                      CE_ARG(rows_l), CE_ARG(policy), CE_ARG(padding), CE_ARG(srt.keys[0]), CE_ARG(srt.idx[0]),
                      CE_ARG(ctx->errbuf), CE_ARG(slot_arg), CE_END));
    CHECK(step_1d(&b, k, "ce_bwd_keys", n, 0));
    CHECK(sort_run(&b, &srt, bit_width(rows), &which));
    CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b.opts, "ce_bwd_rows", &k));
    none32 = (cl_uint)rows;
    none64 = rows;
    if (b.key64)
      CHECK(ce_set_args(ctx, k, "ce_bwd_rows", CE_ARG(grad_out->buffer), CE_ARG(g_off), CE_ARG(g_ldl),
                        CE_ARG(colsl), CE_ARG(srt.keys[which]), CE_ARG(srt.idx[which]), CE_ARG(nl), CE_ARG(none64),
                        CE_ARG(grid.slice_bits), CE_ARG(grid.bw), CE_ARG(grid.split), CE_ARG(scale), CE_ARG(freq_i), CE_ARG(target->buffer), CE_ARG(t_off),
                        CE_ARG(t_ldl), CE_ARG(lr_f), CE_ARG(mode), CE_ARG(drop), CE_ARG(seed_lo), CE_ARG(seed_hi), CE_ARG(keep),
                        CE_END));
    else
      CHECK(ce_set_args(ctx, k, "ce_bwd_rows", CE_ARG(grad_out->buffer), CE_ARG(g_off), CE_ARG(g_ldl),
                        CE_ARG(colsl), CE_ARG(srt.keys[which]), CE_ARG(srt.idx[which]), CE_ARG(nl), CE_ARG(none32),
                        CE_ARG(grid.slice_bits), CE_ARG(grid.bw), CE_ARG(grid.split), CE_ARG(scale), CE_ARG(freq_i), CE_ARG(target->buffer), CE_ARG(t_off),
                        CE_ARG(t_ldl), CE_ARG(lr_f), CE_ARG(mode), CE_ARG(drop), CE_ARG(seed_lo), CE_ARG(seed_hi), CE_ARG(keep),
                        CE_END));
    CHECK(step_2d(&b, k, "ce_bwd_rows", grid.nx, grid.ny, !pg));
  }

  if (pg) {
    int which;
    const clembed_ids *so = b.so;
    cl_mem sob = so ? so->buffer : none_mem, pgb = pg->buffer;
    /* Token i = b * len + j, len = seq_len (0: one sequence of n). */
    size_t len = opt->seq_len ? opt->seq_len : n, nseq = n / len + (n % len != 0);
    cl_ulong len_l = len, pos_offset = opt->position_offset, so_off = so ? so->offset : 0;
    cl_ulong p_rows_l = p_rows, p_off = pg->offset, p_ldl = p_ld;
    cl_int so64 = so && so->type == CLEMBED_I64, has_so = so != NULL;
    CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b.opts, "ce_bwd_pos_keys", &k));
    CHECK(ce_set_args(ctx, k, "ce_bwd_pos_keys", CE_ARG(nl), CE_ARG(len_l), CE_ARG(pos_offset), CE_ARG(sob),
                      CE_ARG(sob), CE_ARG(so_off), CE_ARG(so64), CE_ARG(has_so), CE_ARG(p_rows_l),
                      CE_ARG(srt.keys[0]), CE_ARG(srt.idx[0]), CE_ARG(ctx->errbuf), CE_ARG(slot_arg), CE_END));
    CHECK(step_2d(&b, k, "ce_bwd_pos_keys", BW_ROW_ITEMS, nseq, 0));
    CHECK(sort_run(&b, &srt, bit_width(p_rows), &which));
    CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b.opts, "ce_bwd_pos", &k));
    none32 = (cl_uint)p_rows;
    none64 = p_rows;
    if (b.key64)
      CHECK(ce_set_args(ctx, k, "ce_bwd_pos", CE_ARG(grad_out->buffer), CE_ARG(g_off), CE_ARG(g_ldl),
                        CE_ARG(colsl), CE_ARG(srt.keys[which]), CE_ARG(srt.idx[which]), CE_ARG(nl), CE_ARG(none64),
                        CE_ARG(grid.slice_bits), CE_ARG(grid.bw), CE_ARG(grid.split), CE_ARG(pgb), CE_ARG(p_off), CE_ARG(p_ldl), CE_ARG(drop),
                        CE_ARG(seed_lo), CE_ARG(seed_hi), CE_ARG(keep), CE_END));
    else
      CHECK(ce_set_args(ctx, k, "ce_bwd_pos", CE_ARG(grad_out->buffer), CE_ARG(g_off), CE_ARG(g_ldl),
                        CE_ARG(colsl), CE_ARG(srt.keys[which]), CE_ARG(srt.idx[which]), CE_ARG(nl), CE_ARG(none32),
                        CE_ARG(grid.slice_bits), CE_ARG(grid.bw), CE_ARG(grid.split), CE_ARG(pgb), CE_ARG(p_off), CE_ARG(p_ldl), CE_ARG(drop),
                        CE_ARG(seed_lo), CE_ARG(seed_hi), CE_ARG(keep), CE_END));
    CHECK(step_2d(&b, k, "ce_bwd_pos", grid.nx, grid.ny, 1));
  }

cleanup:
  /* Released after enqueueing: OpenCL keeps them until the commands finish. */
  sort_release(&srt);
  if (counts) clReleaseMemObject(counts);
  if (b.ch.prev) clReleaseEvent(b.ch.prev);
  return status;
}

clembed_status clembed_backward(clembed_context *ctx, const clembed_matrix *grad_out, const clembed_ids *ids,
                                const clembed_backward_options *opt, clembed_matrix *grad_table, cl_uint nwait,
                                const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_backward");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  return ce_track_end(ctx, run(ctx, "clembed_backward", 0, grad_out, ids, 0.0f, opt, grad_table, nwait, wait, ev),
                      event, &own);
}

clembed_status clembed_sgd_update(clembed_context *ctx, const clembed_matrix *grad_out, const clembed_ids *ids,
                                  float learning_rate, const clembed_backward_options *opt, clembed_matrix *table,
                                  cl_uint nwait, const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_sgd_update");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  return ce_track_end(ctx, run(ctx, "clembed_sgd_update", 1, grad_out, ids, learning_rate, opt, table, nwait, wait, ev),
                      event, &own);
}

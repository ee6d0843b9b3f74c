/* The backward: clembed_backward, and the segment fold every sparse step
 * shares (ce_segment_step; clembed_sgd_update is in optim.c).
 *
 * What is computed, in this order of float32 operations, for every table row v
 * and column c (tokens i in ascending order; m_i = grad_out[i][c] as float32,
 * or with dropout m_i = g * keep when the forward kept element i*cols + c and
 * exactly 0.0f when it dropped it, keep = 1.0f / (1.0f - dropout) computed on
 * the host in float as the forward does):
 *     S = 0.0f;  S = S + m_i  for each token i whose id resolves to v
 *     r = scale * S;   r = r / (float)count_v   (scale_grad_by_freq only)
 * and then the store mode (ce_store_mode): grad_table[v][c] = r (OVERWRITE),
 * grad_table[v][c] + r (ACCUMULATE), or table[v][c] = round_to_dtype(table[v][c]
 * - learning_rate * r) (SGD). count_v is the number of tokens of this call
 * whose id resolves to v (after the policy: with WRAP, -1 and rows-1 count
 * together; with CLAMP, clamped ids count for the row they go to). The padding
 * row, dropped ids (ZERO) and bad ids (CHECK, and WRAP beyond -rows; reported
 * as a deferred CLEMBED_ERR_INDEX_OUT_OF_RANGE) add nothing. No FP contraction
 * anywhere. With position_grad: position_grad[p][c] = position_grad[p][c] + S_p,
 * where S_p folds m_i (dropout-masked, not scaled: the forward does not scale
 * the positional part) over the tokens at position p in ascending token order;
 * every token counts, padding and bad ids included (the forward adds their
 * positional part). A position outside [0, position_grad->rows) is a deferred
 * error and adds nothing.
 *
 * Deterministic path (the default), as PyTorch's EmbeddingBackwardKernel.cu:
 *   1. ce_bwd_keys: key[i] = resolved row (or `none` = rows, sorting last),
 *      idx[i] = i; reports bad ids into the operation's error slot.
 *   2. the stable radix sort of (key, idx) (sort.c).
 *   3. ce_bwd_rows: each segment of equal keys (one table row) is folded in
 *      sorted = ascending token order and its row stored once (no atomics).
 *      A segment is a strict left fold, so a long one (one id repeated 20,000
 *      times) is never split over its tokens (a split and recombined sum would
 *      change the bits); it is split over column blocks instead, which go to
 *      different work-groups, so it stays parallel over its columns. The
 *      shapes (segment_grid) come from the tuning table: on a GPU consecutive
 *      work-items take consecutive columns; with the CPU shapes a work-item
 *      takes groups of sorted positions and folds the short segments that
 *      start there side by side over their whole rows.
 *   4. with position_grad: the same with ce_bwd_pos_keys and ce_bwd_pos.
 * So the result is bit-identical from run to run, whatever the local size or
 * the number of compute units, and equals the sequential float32 sum above.
 * Temporaries (created per call, released after enqueueing) are O(ids), never
 * O(vocabulary).
 *
 * Contributions other than one per token (a ce_contrib in the ce_step: the
 * bags, bag.c) replace step 1 with their producer's keys and records, and the
 * fold kernels are built with -DBAG=1 to read each entry's gradient row through
 * its record (grad_out split too, every piece in each launch); the rest is the
 * same.
 *
 * Atomic path (deterministic = 0, clembed_backward only, never the default):
 * ce_bwd_atomic adds (scale * m_i) / count_v into grad_table with a
 * compare-and-swap loop on the 32-bit word (OpenCL 1.2 atomic_cmpxchg). The
 * order of the additions, and so the last bits, vary from run to run; it skips
 * the sort, and so can win on a GPU when ids repeat little. scale_grad_by_freq
 * counts rows with atomic_inc into a temporary of rows x 4 bytes. position_grad
 * is always summed by the deterministic path. */
#include "ops.h"

#include <stdio.h>
#include <string.h>

clembed_backward_options clembed_backward_defaults(void) {
  clembed_backward_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.scale = 1.0f;
  o.policy = CLEMBED_INDEX_CHECK;
  o.padding_idx = CLEMBED_NO_PADDING;
  o.scale_grad_by_freq = 0;
  o.deterministic = 1;
  o.accumulate = 1;
  return o;
}

/* One call of a sparse step. */
typedef struct seg_call {
  clembed_context *ctx;
  const ce_step *step;
  const clembed_matrix *grad, *target, *pg;
  const clembed_ids *ids;
  const clembed_backward_options *opt;
  size_t n;                       /* sorted entries: the ids, or the contributions' count */
  size_t g_ld, t_ld, p_ld;
  ce_pieces gp, tp, pgp;          /* grad_out, the target, position_grad: their pieces */
  cl_long padding;
  int key64;
  char opts[768];
  ce_chain ch;
  ce_record rec;
  ce_sort srt;
  cl_mem counts;
  ce_joined gj; /* grad_out joined into one buffer (more pieces than a launch takes) */
} seg_call;

static clembed_status check_args(seg_call *b) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = b->ctx;
  int training = b->step->mode >= CE_STORE_SGD; /* the target is a table to step */
  const char *what = b->step->what, *tname = training ? "table" : "grad_table";
  const clembed_matrix *g = b->grad, *t = b->target;
  const clembed_backward_options *opt = b->opt;
  const ce_contrib *contrib = b->step->contrib; /* (whose producer checks grad_out's shape) */
  CHECK(ce_check_pieces(ctx, g, "grad_out", 0, &b->gp));
  b->g_ld = b->gp.ld;
  b->gp.whole = 1; /* a segment's tokens (a contribution's bag rows) are anywhere in grad_out */
  if (!contrib) CHECK(ce_check_ids(ctx, b->ids, "ids"));
  CHECK(ce_check_pieces(ctx, t, tname, 0, &b->tp));
  b->t_ld = b->tp.ld;
  b->n = contrib ? contrib->count : b->ids->count;
  if (!contrib && (g->rows != b->ids->count || g->cols != t->cols))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "grad_out", -1, (int64_t)g->rows,
             "%s: grad_out is %zu x %zu but %zu ids of a %s with %zu cols need %zu x %zu", what, g->rows, g->cols,
             b->ids->count, tname, t->cols, b->ids->count, t->cols);
  if (!training && t->dtype != CLEMBED_F32)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, tname, -1, (int64_t)t->dtype, "%s: grad_table must be F32, not %s",
             what, ce_dtype_name(t->dtype));
  if (training && (unsigned)t->dtype > (unsigned)CLEMBED_BF16)
    FAIL_ARG(CLEMBED_ERR_UNSUPPORTED, "table", -1, (int64_t)t->dtype,
             "%s: table: a quantized table (%s) cannot be trained; F32, F16 or BF16 can", what,
             ce_dtype_name(t->dtype));
  if ((uint64_t)b->n >= 0xFFFFFFFFu)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, (int64_t)b->n, "%s: %zu ids; at most 4294967294 per call",
             what, b->n);
  CHECK(ce_check_common(ctx, what, opt->policy, opt->dropout, b->n, opt->seq_len, opt->sequence_offsets));
  if (!b->step->atomic || b->pg) CHECK(ce_fold_fits(ctx, what, "ids", b->n));
  CHECK(ce_padding(ctx, opt->padding_idx, t->rows, what, &b->padding));
  if (b->pg) {
    CHECK(ce_check_pieces(ctx, b->pg, "position_grad", 0, &b->pgp));
    b->p_ld = b->pgp.ld;
    if (b->pg->dtype != CLEMBED_F32)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "position_grad", -1, (int64_t)b->pg->dtype,
               "%s: position_grad must be F32, not %s", what, ce_dtype_name(b->pg->dtype));
    if (b->pg->cols != t->cols)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "position_grad", -1, (int64_t)b->pg->cols,
               "%s: position_grad has %zu cols but the %s has %zu", what, b->pg->cols, tname, t->cols);
  }
cleanup:
  return status;
}

/* The kernels' options and the error slot (CHECK and WRAP report bad ids;
 * CLAMP has nowhere to send an id of an empty table; positions may be bad). */
static clembed_status prepare(seg_call *b) {
  clembed_context *ctx = b->ctx;
  const ce_tuning *t = ctx->tune;
  const clembed_backward_options *opt = b->opt;
  size_t rows = b->target->rows, p_rows = b->pg ? b->pg->rows : 0;
  /* keys hold rows (or positions) and their `none` value, rows itself */
  b->key64 = (uint64_t)rows > 0xFFFFFFFFu || (uint64_t)p_rows > 0xFFFFFFFFu;
  /* short rows one after another with later rows asked for, where the device
   * takes prefetch hints (CE_FOLD_ORDER 1); longer ones side by side, which
   * the CPU's own prefetchers follow better */
  unsigned order = ctx->prefetch && clembed_dtype_row_bytes(b->grad->dtype, b->grad->cols) <= t->fold_ahead_bytes;
  /* exact (correctly rounded) division for scale_grad_by_freq where the device can */
  const char *div = ctx->exact_div ? " -cl-fp32-correctly-rounded-divide-sqrt" : "";
  /* stochastic rounding: the stores of a stepped F16 or BF16 table (an F32 table ignores it) */
  int sr = b->step->mode >= CE_STORE_SGD && b->step->rounding.stochastic &&
           (b->target->dtype == CLEMBED_F16 || b->target->dtype == CLEMBED_BF16);
  /* (fold_ahead and step_ahead only shape prefetch hints: 0 where the device takes none, one program) */
  snprintf(b->opts, sizeof b->opts,
           "-DGRAD_DT=%d -DTABLE_DT=%d -DDROPOUT=%d -DKEY64=%d -DVEC=%u -DFOLD_TILE=%u -DFOLD_GROUP=%u -DFOLD_AHEAD=%u "
           "-DSTEP_AHEAD=%u -DCE_FOLD_ORDER=%u -DCE_STORE_OVERWRITE=%d -DCE_STORE_ACCUMULATE=%d -DCE_STORE_SGD=%d "
           "-DCE_STORE_ADAGRAD=%d -DCE_STORE_ADAM=%d -DBAG=%d -DSTOCH_ROUND=%d%s",
           (int)b->grad->dtype, (int)b->target->dtype, opt->dropout > 0.0f, b->key64, t->fold_vec, t->fold_tile,
           t->fold_group, ctx->prefetch ? t->fold_ahead : 0, ctx->prefetch ? t->step_ahead : 0, order,
           CE_STORE_OVERWRITE, CE_STORE_ACCUMULATE, CE_STORE_SGD, CE_STORE_ADAGRAD, CE_STORE_ADAM,
           b->step->contrib != NULL, sr, div);
  /* split matrices: the pieces each launch takes, planned together so that
   * every kernel of the call sees the same counts */
  ce_optim_step *o = b->step->optim;
  ce_pieces *mats[5] = {&b->gp, &b->tp, o ? &o->s1 : NULL, o ? &o->s2 : NULL, b->pg ? &b->pgp : NULL};
  /* grad_out (whole) in more pieces than a launch takes: joined into one buffer first */
  clembed_status status = CLEMBED_OK;
  if (ce_pieces_plan_short(ctx, mats, 5) == 0)
    status = ce_join(&b->ch, b->step->what, b->grad, &b->gp, 1, &b->gj);
  if (status == CLEMBED_OK) status = ce_pieces_plan(ctx, b->step->what, mats, 5);
  if (status != CLEMBED_OK) return status;
  ce_pieces_option(b->opts, sizeof b->opts, &b->gp, "grad");
  ce_pieces_option(b->opts, sizeof b->opts, &b->tp, "tab");
  ce_pieces_option(b->opts, sizeof b->opts, &b->tp, "gt");
  if (o) {
    ce_pieces_option(b->opts, sizeof b->opts, &o->s1, "s1");
    ce_pieces_option(b->opts, sizeof b->opts, &o->s2, "s2");
  }
  if (b->pg) ce_pieces_option(b->opts, sizeof b->opts, &b->pgp, "pg");
  const clembed_ids *so = b->pg ? opt->sequence_offsets : NULL;
  b->rec = (ce_record){CE_NO_SLOT, CE_FAMILY_BACKWARD, b->opts, b->ids, so, opt->seq_len};
  int token_work = b->n > 0 && !b->step->contrib; /* with 0 columns the ids are still checked */
  if (token_work && (opt->policy == CLEMBED_INDEX_CHECK || opt->policy == CLEMBED_INDEX_WRAP ||
                     (opt->policy == CLEMBED_INDEX_CLAMP && rows == 0) || b->pg)) {
    ce_slot_info info = {b->step->what, "position_grad", opt->policy == CLEMBED_INDEX_WRAP, rows, p_rows,
                         opt->seq_len, opt->position_offset, so != NULL, 0, NULL, 0, 0, 0, 0, 0, 0, 0, 0};
    return ce_slot_reserve(ctx, &info, &b->rec.slot);
  }
  return CLEMBED_OK;
}

/* Zeroes a rows x cols F32 matrix (fixed-width range: the work-group shape
 * does not depend on cols). */
static clembed_status zero_rows(seg_call *b, cl_mem m, cl_ulong off, cl_ulong ld, cl_ulong rows, cl_ulong cols,
                                size_t ny) {
  clembed_status status = CLEMBED_OK;
  cl_kernel k;
  CHECK(ce_kernel(b->ctx, CE_FAMILY_BACKWARD, b->opts, "ce_bwd_zero", &k));
  CHECK(ce_set_args(b->ctx, k, "ce_bwd_zero", CE_ARG(m), CE_ARG(off), CE_ARG(ld), CE_ARG(rows), CE_ARG(cols), CE_END));
  CHECK(ce_chain_2d(&b->ch, k, "ce_bwd_zero", b->ctx->tune->row_items, ny));
cleanup:
  return status;
}

/* The shape of a segment kernel's range (see CE_SEGMENTS and CE_GROUPS in
 * cl/ops/backward.cl): nx = work-items across a column block (a power of two,
 * so the launch does not round it), bw = a block's width in columns, ny =
 * blocks * 2^slice_bits, and split = the segment length from which a segment
 * is split into blocks. Slices: enough for the tuning's work-items per compute
 * unit, but no more than the positions (or groups of them) to start from. */
/* The least power of two 2^bits >= want (1 for want 0 or 1). */
static size_t pow2_at_least(size_t want, cl_uint *bits) {
  size_t p = 1;
  *bits = 0;
  while (p < want) {
    p *= 2;
    (*bits)++;
  }
  return p;
}

/* The sorted positions a segment kernel's work-items start from: every one on
 * a GPU, groups of `group` on a CPU (a CPU item takes groups of positions:
 * fold_group, or fold_vec for ce_bwd_rowwise_grouped). */
static size_t fold_starts(const ce_tuning *t, size_t n, size_t group) {
  return t->cpu_shapes ? n / group + (n % group != 0) : n;
}

typedef struct seg_grid {
  size_t nx, ny;
  cl_ulong bw, split;
  cl_uint slice_bits;
} seg_grid;

static seg_grid segment_grid(const clembed_context *ctx, size_t cols, size_t n) {
  const ce_tuning *t = ctx->tune;
  int cpu = t->cpu_shapes;
  seg_grid g;
  size_t vec = t->fold_vec, items = (cols + vec - 1) / vec, bx = 1;
  while (!cpu && bx < items && bx * 2 <= t->fold_block_columns / vec) bx *= 2;
  g.bw = cpu ? t->fold_block_columns : bx * vec;
  g.split = t->fold_split;
  size_t blocks = (cols + g.bw - 1) / g.bw;
  if (blocks == 0) blocks = 1;
  /* the items that share the ordinary segments: bx per slice (block 0 on a CPU) */
  size_t sharing = cpu ? bx : bx * blocks;
  size_t want = ((size_t)ctx->units * t->fold_slices_per_unit + sharing - 1) / sharing;
  size_t starts = fold_starts(t, n, t->fold_group);
  if (want > starts) want = starts;
  if (want < t->fold_min_slices) want = t->fold_min_slices;
  size_t slices = pow2_at_least(want, &g.slice_bits);
  g.nx = bx;
  g.ny = blocks * slices;
  return g;
}

/* Contributions (BAG): the fold kernels' last two arguments, cl/ops/backward.cl's
 * CE_BAG_KPARAMS (the records and max_rows). */
static clembed_status contrib_args(seg_call *b, cl_kernel k, const char *name) {
  const ce_contrib *c = b->step->contrib;
  cl_uint nargs = 0;
  if (!c) return CLEMBED_OK;
  cl_int err = clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL);
  if (err == CL_SUCCESS) err = clSetKernelArg(k, nargs - 2, sizeof(cl_mem), &c->records);
  if (err == CL_SUCCESS) err = clSetKernelArg(k, nargs - 1, sizeof(cl_mem), &c->max_rows);
  return err == CL_SUCCESS ? CLEMBED_OK : ce_cl_fail(b->ctx, err, name);
}

/* An optimizer's fold (clembed_optimizer_step): ce_bwd_optim in the shape of
 * ce_bwd_rows with the state rows beside the table's, or for ROWWISE_ADAGRAD
 * ce_bwd_rowwise, a work-item per row (its sum of squares is a fold over the
 * columns in order), the rows spread over slices of sorted positions; on a
 * CPU ce_bwd_rowwise_grouped, the rows of a group of fold_vec positions together. */
static clembed_status fold_optim(seg_call *b, seg_grid grid, int which, const void *none, size_t none_size) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = b->ctx;
  const clembed_backward_options *opt = b->opt;
  ce_optim_step *o = b->step->optim;
  const clembed_matrix *t = b->target;
  /* a state the kind does not have is a NULL buffer, never read or written */
  cl_ulong s1_ld = o->s1_ld, s2_ld = o->s2_ld;
  cl_ulong nl = b->n, colsl = t->cols, g_ldl = b->g_ld;
  cl_ulong t_ldl = b->t_ld;
  ce_pieces *mats[3] = {&b->tp, &o->s1, &o->s2}; /* grad_out is whole in every launch */
  cl_int freq_i = opt->scale_grad_by_freq != 0, mode = (cl_int)b->step->mode;
  cl_float scale = opt->scale, lr = b->step->lr, drop = opt->dropout;
  cl_float keep = opt->dropout > 0.0f ? 1.0f / (1.0f - opt->dropout) : 1.0f;
  cl_float eps = o->eps, wd = o->weight_decay, b1c = o->b1c, b2c = o->b2c, step_size = o->step_size;
  cl_uint seed_lo = (cl_uint)opt->dropout_seed, seed_hi = (cl_uint)(opt->dropout_seed >> 32);
  const ce_rounding *rd = &b->step->rounding; /* stochastic rounding's (unused without it) */
  cl_uint sr_lo = (cl_uint)rd->seed, sr_hi = (cl_uint)(rd->seed >> 32);
  cl_ulong sr_step = rd->step, sr_row0 = rd->first_row;
  cl_kernel k;
  if (b->step->mode == CE_STORE_ROWWISE_ADAGRAD) {
    /* slices: a power of two, the tuning's work-items per compute unit, at
     * most the positions (a CPU's ce_bwd_rowwise_grouped: groups of them) */
    const char *name = ctx->tune->cpu_shapes ? "ce_bwd_rowwise_grouped" : "ce_bwd_rowwise";
    size_t want = (size_t)ctx->units * ctx->tune->fold_slices_per_unit;
    size_t starts = fold_starts(ctx->tune, b->n, ctx->tune->fold_vec);
    cl_uint slice_bits;
    if (want > starts) want = starts;
    size_t slices = pow2_at_least(want, &slice_bits);
    CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b->opts, name, &k));
    do {
      CHECK(ce_set_args(ctx, k, name, CE_PIECES(&b->gp), CE_ARG(g_ldl), CE_ARG(colsl), CE_ARG(b->srt.keys[which]),
                        CE_ARG(b->srt.idx[which]), CE_ARG(nl), none_size, none, CE_ARG(slice_bits), CE_ARG(scale),
                        CE_ARG(freq_i), CE_PIECES(&b->tp), CE_ARG(t_ldl), CE_PIECES(&o->s1), CE_ARG(s1_ld),
                        CE_ARG(lr), CE_ARG(eps), CE_ARG(wd), CE_ARG(drop), CE_ARG(seed_lo), CE_ARG(seed_hi),
                        CE_ARG(keep), CE_ARG(sr_lo), CE_ARG(sr_hi), CE_ARG(sr_step), CE_ARG(sr_row0), CE_END));
      CHECK(contrib_args(b, k, name));
      CHECK(ce_chain_2d(&b->ch, k, name, 1, slices));
    } while (ce_pieces_next(mats, 2));
  } else {
    const char *name = ctx->tune->cpu_shapes ? "ce_bwd_optim_grouped" : "ce_bwd_optim";
    CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b->opts, name, &k));
    do {
      CHECK(ce_set_args(ctx, k, name, CE_PIECES(&b->gp), CE_ARG(g_ldl), CE_ARG(colsl), CE_ARG(b->srt.keys[which]),
                        CE_ARG(b->srt.idx[which]), CE_ARG(nl), none_size, none, CE_ARG(grid.slice_bits),
                        CE_ARG(grid.bw), CE_ARG(grid.split), CE_ARG(scale), CE_ARG(freq_i), CE_PIECES(&b->tp),
                        CE_ARG(t_ldl), CE_PIECES(&o->s1), CE_ARG(s1_ld), CE_PIECES(&o->s2), CE_ARG(s2_ld),
                        CE_ARG(lr), CE_ARG(eps), CE_ARG(wd), CE_ARG(b1c), CE_ARG(b2c), CE_ARG(step_size),
                        CE_ARG(mode), CE_ARG(drop), CE_ARG(seed_lo), CE_ARG(seed_hi), CE_ARG(keep), CE_ARG(sr_lo),
                        CE_ARG(sr_hi), CE_ARG(sr_step), CE_ARG(sr_row0), CE_END));
      CHECK(contrib_args(b, k, name));
      CHECK(ce_chain_2d(&b->ch, k, name, grid.nx, grid.ny));
    } while (ce_pieces_next(mats, 3));
  }
cleanup:
  return status;
}

/* The token keys, the sort, and the fold of each row's segment with the store mode. */
/* The sort keys of the ids (the row each token adds to, or none), which also
 * checks every id against the table and records the first bad one. */
static clembed_status make_keys(seg_call *b) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = b->ctx;
  const clembed_ids *ids = b->ids;
  const ce_contrib *c = b->step->contrib;
  if (c) return c->keys(&b->ch, c, b->srt.keys[0], b->srt.idx[0], b->key64);
  cl_kernel k;
  cl_mem idb = ids->buffer;
  cl_ulong id_off = ids->offset, nl = ids->count, rows_l = b->target->rows;
  cl_int id64 = ids->type == CLEMBED_I64, policy = (cl_int)b->opt->policy;
  cl_uint slot_arg = b->rec.slot == CE_NO_SLOT ? 0 : b->rec.slot;
  CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b->opts, "ce_bwd_keys", &k));
  CHECK(ce_set_args(ctx, k, "ce_bwd_keys", CE_ARG(idb), CE_ARG(idb), CE_ARG(id_off), CE_ARG(id64), CE_ARG(nl),
                    CE_ARG(rows_l), CE_ARG(policy), CE_ARG(b->padding), CE_ARG(b->srt.keys[0]),
                    CE_ARG(b->srt.idx[0]), CE_ARG(ctx->errbuf), CE_ARG(slot_arg), CE_END));
  CHECK(ce_chain_1d(&b->ch, k, "ce_bwd_keys", ids->count, 0));
cleanup:
  return status;
}

static clembed_status fold_rows(seg_call *b) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = b->ctx;
  const clembed_backward_options *opt = b->opt;
  cl_kernel k;
  int which;
  cl_ulong nl = b->n, rows_l = b->target->rows, colsl = b->target->cols;
  cl_int freq_i = opt->scale_grad_by_freq != 0;
  CHECK(make_keys(b));
  CHECK(ce_sort_run(&b->ch, &b->srt, ce_bit_width(rows_l), &which));
  seg_grid grid = segment_grid(ctx, b->target->cols, b->n);
  cl_uint none32 = (cl_uint)rows_l;
  cl_ulong none64 = rows_l, g_ldl = b->g_ld, t_ldl = b->t_ld;
  cl_float scale = opt->scale, lr = b->step->lr, drop = opt->dropout;
  cl_float keep = opt->dropout > 0.0f ? 1.0f / (1.0f - opt->dropout) : 1.0f;
  cl_uint seed_lo = (cl_uint)opt->dropout_seed, seed_hi = (cl_uint)(opt->dropout_seed >> 32);
  cl_int mode = (cl_int)b->step->mode; /* a kernel argument: one program for every store mode */
  const ce_rounding *rd = &b->step->rounding; /* stochastic rounding's (unused without it) */
  cl_uint sr_lo = (cl_uint)rd->seed, sr_hi = (cl_uint)(rd->seed >> 32);
  cl_ulong sr_step = rd->step, sr_row0 = rd->first_row;
  size_t none_size = b->key64 ? sizeof none64 : sizeof none32;
  const void *none = b->key64 ? (const void *)&none64 : (const void *)&none32;
  if (b->step->optim) {
    CHECK(fold_optim(b, grid, which, none, none_size));
    goto cleanup;
  }
  /* one kernel per shape: segments over columns, or groups of segments over whole rows */
  const char *name = ctx->tune->cpu_shapes ? "ce_bwd_rows_grouped" : "ce_bwd_rows";
  CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b->opts, name, &k));
  ce_pieces *mats[1] = {&b->tp}; /* grad_out is whole in every launch */
  do {
    CHECK(ce_set_args(ctx, k, name, CE_PIECES(&b->gp), CE_ARG(g_ldl), CE_ARG(colsl), CE_ARG(b->srt.keys[which]),
                      CE_ARG(b->srt.idx[which]), CE_ARG(nl), none_size, none, CE_ARG(grid.slice_bits),
                      CE_ARG(grid.bw), CE_ARG(grid.split), CE_ARG(scale), CE_ARG(freq_i), CE_PIECES(&b->tp),
                      CE_ARG(t_ldl), CE_ARG(lr), CE_ARG(mode), CE_ARG(drop), CE_ARG(seed_lo), CE_ARG(seed_hi),
                      CE_ARG(keep), CE_ARG(sr_lo), CE_ARG(sr_hi), CE_ARG(sr_step), CE_ARG(sr_row0), CE_END));
    CHECK(contrib_args(b, k, name));
    CHECK(ce_chain_2d(&b->ch, k, name, grid.nx, grid.ny));
  } while (ce_pieces_next(mats, 1));
cleanup:
  return status;
}

/* The position keys (as the forward computes positions), the sort, and the
 * fold of each position's segment added into position_grad. */
static clembed_status fold_positions(seg_call *b) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = b->ctx;
  const clembed_backward_options *opt = b->opt;
  const clembed_ids *so = b->rec.sequence_offsets;
  const clembed_matrix *pg = b->pg;
  size_t n = b->ids->count;
  cl_kernel k;
  int which;
  cl_mem none_mem = NULL, sob = so ? so->buffer : none_mem;
  /* token i = b * len + j, len = seq_len (0: one sequence of n) */
  size_t len = opt->seq_len ? opt->seq_len : n, nseq = n / len + (n % len != 0);
  cl_ulong nl = n, len_l = len, pos_offset = opt->position_offset, so_off = so ? so->offset : 0;
  cl_ulong p_rows = pg->rows, p_ldl = b->p_ld, colsl = pg->cols;
  cl_ulong g_ldl = b->g_ld;
  cl_int so64 = so && so->type == CLEMBED_I64, has_so = so != NULL;
  cl_uint slot_arg = b->rec.slot == CE_NO_SLOT ? 0 : b->rec.slot;
  CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b->opts, "ce_bwd_pos_keys", &k));
  CHECK(ce_set_args(ctx, k, "ce_bwd_pos_keys", CE_ARG(nl), CE_ARG(len_l), CE_ARG(pos_offset), CE_ARG(sob),
                    CE_ARG(sob), CE_ARG(so_off), CE_ARG(so64), CE_ARG(has_so), CE_ARG(p_rows),
                    CE_ARG(b->srt.keys[0]), CE_ARG(b->srt.idx[0]), CE_ARG(ctx->errbuf), CE_ARG(slot_arg), CE_END));
  CHECK(ce_chain_2d(&b->ch, k, "ce_bwd_pos_keys", ctx->tune->row_items, nseq));
  CHECK(ce_sort_run(&b->ch, &b->srt, ce_bit_width(p_rows), &which));
  seg_grid grid = segment_grid(ctx, pg->cols, n);
  cl_uint none32 = (cl_uint)p_rows;
  cl_ulong none64 = p_rows;
  cl_float drop = opt->dropout, keep = opt->dropout > 0.0f ? 1.0f / (1.0f - opt->dropout) : 1.0f;
  cl_uint seed_lo = (cl_uint)opt->dropout_seed, seed_hi = (cl_uint)(opt->dropout_seed >> 32);
  size_t none_size = b->key64 ? sizeof none64 : sizeof none32;
  const void *none = b->key64 ? (const void *)&none64 : (const void *)&none32;
  const char *name = ctx->tune->cpu_shapes ? "ce_bwd_pos_grouped" : "ce_bwd_pos";
  CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b->opts, name, &k));
  ce_pieces *mats[1] = {&b->pgp};
  do {
    CHECK(ce_set_args(ctx, k, name, CE_PIECES(&b->gp), CE_ARG(g_ldl), CE_ARG(colsl), CE_ARG(b->srt.keys[which]),
                      CE_ARG(b->srt.idx[which]), CE_ARG(nl), none_size, none, CE_ARG(grid.slice_bits),
                      CE_ARG(grid.bw), CE_ARG(grid.split), CE_PIECES(&b->pgp), CE_ARG(p_ldl), CE_ARG(drop),
                      CE_ARG(seed_lo), CE_ARG(seed_hi), CE_ARG(keep), CE_END));
    CHECK(ce_chain_2d(&b->ch, k, name, grid.nx, grid.ny));
  } while (ce_pieces_next(mats, 1));
cleanup:
  return status;
}

/* The atomic path: row counts (scale_grad_by_freq) and the compare-and-swap adds. */
static clembed_status atomic_rows(seg_call *b) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = b->ctx;
  const clembed_backward_options *opt = b->opt;
  const clembed_ids *ids = b->ids;
  size_t rows = b->target->rows;
  cl_kernel k;
  cl_mem none_mem = NULL, idb = ids->buffer;
  cl_ulong id_off = ids->offset, nl = ids->count, rows_l = rows, colsl = b->target->cols;
  cl_int id64 = ids->type == CLEMBED_I64, policy = (cl_int)opt->policy, freq_i = opt->scale_grad_by_freq != 0;
  if (freq_i) {
    CHECK(ce_buffer(ctx, CE_BUFFER_TEMP, rows * sizeof(cl_uint), NULL, "backward: row counts", &b->counts));
    /* zeroed by ce_bwd_zero (0.0f has the bits of 0u) as a 1 x rows matrix */
    CHECK(zero_rows(b, b->counts, 0, rows_l, 1, rows_l, rows ? 1 : 0));
    CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b->opts, "ce_bwd_count", &k));
    CHECK(ce_set_args(ctx, k, "ce_bwd_count", CE_ARG(idb), CE_ARG(idb), CE_ARG(id_off), CE_ARG(id64), CE_ARG(nl),
                      CE_ARG(rows_l), CE_ARG(policy), CE_ARG(b->padding), CE_ARG(b->counts), CE_END));
    CHECK(ce_chain_1d(&b->ch, k, "ce_bwd_count", ids->count, 0));
  }
  cl_mem cnt = b->counts ? b->counts : none_mem;
  cl_ulong g_ldl = b->g_ld, t_ldl = b->t_ld;
  cl_float scale = opt->scale, drop = opt->dropout, keep = opt->dropout > 0.0f ? 1.0f / (1.0f - opt->dropout) : 1.0f;
  cl_uint seed_lo = (cl_uint)opt->dropout_seed, seed_hi = (cl_uint)(opt->dropout_seed >> 32);
  cl_uint slot_arg = b->rec.slot == CE_NO_SLOT ? 0 : b->rec.slot;
  CHECK(ce_kernel(ctx, CE_FAMILY_BACKWARD, b->opts, "ce_bwd_atomic", &k));
  ce_pieces *mats[1] = {&b->tp};
  do {
    CHECK(ce_set_args(ctx, k, "ce_bwd_atomic", CE_PIECES(&b->gp), CE_ARG(g_ldl), CE_ARG(colsl), CE_ARG(idb),
                      CE_ARG(idb), CE_ARG(id_off), CE_ARG(id64), CE_ARG(nl), CE_ARG(rows_l), CE_ARG(policy),
                      CE_ARG(b->padding), CE_ARG(scale), CE_ARG(freq_i), CE_ARG(cnt), CE_PIECES(&b->tp),
                      CE_ARG(t_ldl), CE_ARG(drop), CE_ARG(seed_lo), CE_ARG(seed_hi), CE_ARG(keep),
                      CE_ARG(ctx->errbuf), CE_ARG(slot_arg), CE_END));
    CHECK(ce_chain_2d(&b->ch, k, "ce_bwd_atomic", ctx->tune->row_items, ids->count));
  } while (ce_pieces_next(mats, 1));
cleanup:
  return status;
}

static clembed_status segment_commands(seg_call *b) {
  clembed_status status = CLEMBED_OK;
  const clembed_matrix *t = b->target;
  /* OVERWRITE: every row becomes 0 first (the fold then overwrites the touched ones) */
  if (b->step->mode == CE_STORE_OVERWRITE && t->rows > 0 && t->cols > 0)
    for (size_t j = 0; j < b->tp.count; j++) {
      size_t nr = ce_piece_nrows(&b->tp, j);
      CHECK(zero_rows(b, b->tp.piece[j].buffer, b->tp.piece[j].offset, b->t_ld, nr, t->cols, nr));
    }
  if (b->n == 0) return CLEMBED_OK;
  if (t->cols == 0) { /* nothing to add or step, but every id is still checked */
    CHECK(ce_sort_alloc(b->ctx, b->n, b->key64, &b->srt));
    CHECK(make_keys(b));
    goto cleanup;
  }
  if (!b->step->atomic || b->pg) CHECK(ce_sort_alloc(b->ctx, b->n, b->key64, &b->srt));
  CHECK(b->step->atomic ? atomic_rows(b) : fold_rows(b));
  if (b->pg) CHECK(fold_positions(b));
cleanup:
  return status;
}

clembed_status ce_segment_step(clembed_context *ctx, const ce_step *step, const clembed_matrix *grad_out,
                               const clembed_ids *ids, const clembed_backward_options *opt,
                               clembed_matrix *target, cl_uint nwait, const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  clembed_backward_options defaults;
  seg_call b;
  memset(&b, 0, sizeof b);
  ce_pieces_none(&b.gp);
  ce_pieces_none(&b.tp);
  ce_pieces_none(&b.pgp);
  ce_chain_init(&b.ch, ctx, nwait, wait);
  if (!opt) {
    defaults = clembed_backward_defaults();
    opt = &defaults;
  }
  b.ctx = ctx;
  b.step = step;
  b.grad = grad_out;
  b.ids = ids;
  b.target = target;
  b.opt = opt;
  CHECK(ce_check_events(ctx, nwait, wait));
  b.pg = opt->position_grad; /* checked with the rest */
  CHECK(check_args(&b));
  CHECK(prepare(&b));
  CHECK(segment_commands(&b));
  CHECK(ce_chain_close_checked(&b.ch, &b.rec, event));
cleanup:
  /* released after enqueueing: OpenCL keeps them until the commands finish */
  ce_sort_release(&b.srt);
  if (b.counts) clReleaseMemObject(b.counts);
  ce_chain_release(&b.ch);
  ce_joined_release(&b.gj);
  ce_pieces_release(&b.gp);
  ce_pieces_release(&b.tp);
  ce_pieces_release(&b.pgp);
  return status;
}

clembed_status clembed_backward(clembed_context *ctx, const clembed_matrix *grad_out, const clembed_ids *ids,
                                const clembed_backward_options *opt, clembed_matrix *grad_table, cl_uint nwait,
                                const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_backward");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  clembed_backward_options o = clembed_backward_defaults(); /* the caller's, as far as its struct_size goes */
  clembed_status status = ce_struct_read(ctx, NULL, "opt", -1, &ce_backward_options_layout, opt, &o);
  ce_step step = {"clembed_backward", o.accumulate ? CE_STORE_ACCUMULATE : CE_STORE_OVERWRITE, 0.0f,
                  !o.deterministic, NULL, NULL, {0, 0, 0, 0}};
  if (status == CLEMBED_OK) status = ce_segment_step(ctx, &step, grad_out, ids, &o, grad_table, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

/* The input layer of BERT-style models: the forward with token types
 * (segments) and a fused LayerNorm or RMSNorm (ce_norm_forward, which
 * clembed_embed runs when its options ask for either), and the backward of the
 * whole layer (clembed_embed_backward). The operations and their order are
 * include/clembed.h's; the kernels are cl/ops/norm.cl's, the row sums'
 * fixed order cl/lib/rowsum.cl's.
 *
 * The forward is one kernel: 32 work-items across each token's row (the GPU
 * shape) or whole rows per work-item (the CPU shape: a token, or one position
 * of norm_strided_rows sequences, in groups whose rows are read side by side), each row read
 * once from memory and its passes (the sum, the squared deviations, the
 * output) taken from the cache or a scratch row. Bad ids and positions are
 * reported into the slot clembed_embed uses (ce_embed_slot), bad segment ids
 * into a second slot naming "segment_ids".
 *
 * The backward produces each gradient's contributions and sums them in
 * ascending token order, from 0, then adds them into the gradient:
 *   1. ce_norm_keys resolves every token's id, position and segment id as the
 *      forward does (reporting the bad ones into the same slots) and writes
 *      the position and segment rows (-1: none) the folds below key on;
 *   2. with a norm, ce_norm_bwd(_rows) recomputes each row and writes dx
 *      (when a fold needs it) and the row's mean, rstd, A and B (the stats,
 *      when step 3 needs them); with the tuning's norm_sums (the CPU table,
 *      not on llvmpipe, whose compiler took far too long over these sums) the
 *      CPU shape's strided items, which hold every token of their position
 *      when there are at most `rows` sequences, sum the position table's
 *      gradient themselves (POSG: no position fold); without a norm dx is
 *      grad_out itself, its dropout replayed by the fold;
 *   3. norm_weight (g * xh), norm_bias (grad_out with its dropout) and, with
 *      norm_sums (NORM_SUMS), for a segment table of at most NORM_SMAX rows,
 *      segment_table (dx): every token is in these few sums, so
 *      ce_norm_params walks the tokens in order
 *      for a block of columns per work-item, recomputing xh and dx from the
 *      token's rows and stats (the segment fold of every token keyed to its
 *      row, bit for bit, without its sort or a pass over a temporary);
 *   4. the segment folds (ce_segment_step, backward.c): table (ids, the
 *      forward's policy, padding and scale: with no norm this is
 *      clembed_backward's call exactly), position_table (the position keys)
 *      and segment_table (the segment keys) where steps 2 and 3 did not sum
 *      them. The key folds use CLEMBED_INDEX_ZERO: their keys are resolved
 *      already, -1 adds nothing. */
#include "ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

clembed_norm clembed_norm_defaults(void) {
  clembed_norm n;
  memset(&n, 0, sizeof n);
  n.struct_size = sizeof n;
  n.kind = CLEMBED_NORM_NONE;
  n.eps = 1e-5f;
  return n;
}

clembed_embed_grads clembed_embed_grads_defaults(void) {
  clembed_embed_grads g;
  memset(&g, 0, sizeof g);
  g.struct_size = sizeof g;
  return g;
}

/* The arguments every norm.cl kernel starts with (CE_NORM_IN_ARGS), its
 * matrices in one buffer each (norm_call's in_args: with their pieces). */
#define NORM_IN_ARGS 48

/* ce_norm_params' segment rows (CE_NORM_SMAX): a segment table of at most
 * this many rows has its gradient summed there, a larger one by the fold */
#define NORM_SMAX 4

/* One call: the checked inputs and what the kernels need. */
typedef struct norm_call {
  clembed_context *ctx;
  const char *op;
  const clembed_matrix *table;
  size_t t_ld, s_ld;
  ce_pieces *tp, *rp;       /* the table's pieces, and the output's or grad_out's */
  const clembed_matrix *rm; /* the output or grad_out */
  ce_pieces sp, wp, bp;     /* the segment table's, norm.weight's, norm.bias's (ce_pieces_release) */
  cl_uint in_args;          /* the CE_NORM_IN_ARGS the kernels take */
  const clembed_ids *ids, *sids; /* sids: the segment ids, NULL for type 0 everywhere */
  const clembed_embed_options *opt;
  ce_embed_pos *p;
  cl_long padding;
  clembed_index_policy policy; /* the table's: the call's, CLEMBED_INDEX_ZERO for gathered rows */
  /* matrices in more buffers than a launch takes (fit_pieces): the table's
   * rows gathered through idx; the position table, segment table and out or
   * grad_out joined into one buffer each */
  clembed_matrix grows;
  clembed_ids gidx;
  ce_joined joined[3];
  ce_record rec, srec; /* the slots of ids and positions, and of segment ids */
  unsigned rows;       /* the CPU shape's tokens per work-item (0: the GPU shape) */
  int strided;         /* ...which take one position of `rows` sequences */
  int dx, posg;        /* the backward's rows write dx; its strided items sum the position gradient (POSG) */
  const char *fwd_kernel, *params_kernel; /* the shapes' kernels (norm.cl) */
  char opts[512];
} norm_call;

/* The call's matrices resolved into their pieces (segment table, norm
 * parameters: checked by ce_norm_check already); norm_release after. */
static clembed_status norm_init(norm_call *c, clembed_context *ctx, const char *op, const clembed_matrix *table,
                                ce_pieces *tp, const clembed_ids *ids, const clembed_embed_options *opt,
                                ce_embed_pos *p, cl_long padding, const clembed_matrix *rm, ce_pieces *rp) {
  memset(c, 0, sizeof *c);
  c->rm = rm;
  c->policy = opt->policy;
  c->ctx = ctx;
  c->op = op;
  c->table = table;
  c->tp = tp;
  c->rp = rp;
  c->t_ld = tp->ld;
  c->ids = ids;
  c->opt = opt;
  c->p = p;
  c->padding = padding;
  ce_pieces_none(&c->sp);
  ce_pieces_none(&c->wp);
  ce_pieces_none(&c->bp);
  const clembed_matrix *st = opt->segment_table;
  const clembed_matrix *nw = opt->norm.kind != CLEMBED_NORM_NONE ? opt->norm.weight : NULL;
  const clembed_matrix *nb = opt->norm.kind == CLEMBED_NORM_LAYER ? opt->norm.bias : NULL;
  clembed_status s = CLEMBED_OK;
  if (st && s == CLEMBED_OK) s = ce_check_pieces(ctx, st, "segment_table", 0, &c->sp);
  if (nw && s == CLEMBED_OK) s = ce_check_pieces(ctx, nw, "norm.weight", 0, &c->wp);
  if (nb && s == CLEMBED_OK) s = ce_check_pieces(ctx, nb, "norm.bias", 0, &c->bp);
  if (st) c->s_ld = c->sp.ld;
  return s;
}

static void norm_release(norm_call *c) {
  if (c->grows.buffer) clReleaseMemObject(c->grows.buffer);
  if (c->gidx.buffer) clReleaseMemObject(c->gidx.buffer);
  for (int i = 0; i < 3; i++) ce_joined_release(&c->joined[i]);
  ce_pieces_release(&c->sp);
  ce_pieces_release(&c->wp);
  ce_pieces_release(&c->bp);
}

static int norm_has_layer(const clembed_embed_options *opt) {
  return opt->segment_table || opt->segment_ids || opt->norm.kind != CLEMBED_NORM_NONE || opt->norm.weight ||
         opt->norm.bias;
}

/* A matrix's check (its pieces resolved, and let go). */
static clembed_status check_any(clembed_context *ctx, const clembed_matrix *m, const char *name) {
  ce_pieces p;
  clembed_status s = ce_check_pieces(ctx, m, name, 0, &p);
  ce_pieces_release(&p);
  return s;
}

/* A norm parameter: 1 x cols F32. */
static clembed_status check_param(clembed_context *ctx, const clembed_matrix *m, const char *name, size_t cols) {
  clembed_status status = CLEMBED_OK;
  CHECK(check_any(ctx, m, name));
  if (m->dtype != CLEMBED_F32 || m->rows != 1 || m->cols != cols)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, name, -1, (int64_t)m->cols,
             "%s: %s must be 1 x %zu F32 (it is %zu x %zu %s)", ctx->op, name, cols, m->rows, m->cols,
             ce_dtype_name(m->dtype));
cleanup:
  return status;
}

clembed_status ce_norm_check(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                             const clembed_embed_options *opt, int *layer) {
  clembed_status status = CLEMBED_OK;
  const clembed_norm *nm = &opt->norm;
  *layer = norm_has_layer(opt);
  if (!*layer) return CLEMBED_OK;
  if (opt->segment_ids && !opt->segment_table)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "segment_ids", -1, 0, "%s: segment_ids without a segment_table", ctx->op);
  if (opt->segment_table) {
    const clembed_matrix *s = opt->segment_table;
    CHECK(check_any(ctx, s, "segment_table"));
    if (s->cols != table->cols)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "segment_table", -1, (int64_t)s->cols,
               "%s: segment_table has %zu cols but the table has %zu", ctx->op, s->cols, table->cols);
    if (!opt->segment_ids && s->rows == 0)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "segment_table", -1, 0,
               "%s: segment_table has no rows, and without segment_ids every token is of type 0", ctx->op);
  }
  if (opt->segment_ids) {
    CHECK(ce_check_ids(ctx, opt->segment_ids, "segment_ids"));
    if (opt->segment_ids->count != ids->count)
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "segment_ids", -1, (int64_t)opt->segment_ids->count,
               "%s: %zu segment_ids for %zu ids (one per id)", ctx->op, opt->segment_ids->count, ids->count);
  }
  if ((unsigned)nm->kind > (unsigned)CLEMBED_NORM_RMS)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "norm.kind", -1, (int64_t)nm->kind, "%s: unknown norm.kind %d", ctx->op,
             (int)nm->kind);
  if (nm->kind == CLEMBED_NORM_NONE && (nm->weight || nm->bias))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, nm->weight ? "norm.weight" : "norm.bias", -1, 0,
             "%s: %s given but norm.kind is CLEMBED_NORM_NONE", ctx->op, nm->weight ? "norm.weight" : "norm.bias");
  if (nm->kind == CLEMBED_NORM_RMS && nm->bias)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "norm.bias", -1, 0, "%s: norm.bias given with CLEMBED_NORM_RMS (no bias)",
             ctx->op);
  if (nm->kind != CLEMBED_NORM_NONE && !(nm->eps >= 0.0f && isfinite(nm->eps)))
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "norm.eps", -1, 0, "%s: norm.eps %g must be finite and >= 0", ctx->op,
             (double)nm->eps);
  if (nm->weight) CHECK(check_param(ctx, nm->weight, "norm.weight", table->cols));
  if (nm->bias) CHECK(check_param(ctx, nm->bias, "norm.bias", table->cols));
cleanup:
  return status;
}

/* Split matrices: each with all its pieces in the one launch (whole: a row's
 * work-items share it). One that does not fit is brought into one buffer
 * (gather.c), the one with the most pieces first, until the rest fit: the
 * table's rows that the ids take are gathered (the call then reads them
 * through idx, under ZERO with no padding: the gather resolved the ids and
 * reported the bad ones as the kernels would), the position and segment
 * tables and grad_out are joined, and so is the forward's output, copied back
 * after the kernel (norm_finish). The same values, so the same bits. */
static clembed_status fit_pieces(norm_call *c, ce_chain *ch, int backward) {
  clembed_context *ctx = c->ctx;
  const clembed_matrix *mat[4] = {c->table, c->p->pt, c->opt->segment_table, c->rm};
  for (;;) {
    ce_pieces *mats[4] = {c->tp, &c->p->pp, &c->sp, c->rp};
    for (int i = 0; i < 4; i++) mats[i]->whole = 1;
    long i = ce_pieces_plan_short(ctx, mats, 4);
    clembed_status s = CLEMBED_OK;
    if (i < 0) return CLEMBED_OK;
    if (i == 0) {
      s = ce_gather_rows(ch, c->op, c->table, c->tp, c->ids, c->policy, c->padding, c->rec.slot, &c->grows, &c->gidx);
      if (s != CLEMBED_OK) return s;
      c->table = &c->grows;
      c->ids = &c->gidx;
      c->policy = CLEMBED_INDEX_ZERO;
      c->padding = -1;
      ce_pieces_release(c->tp);
      s = ce_check_pieces(ctx, c->table, "table", 1, c->tp);
      c->t_ld = c->tp->ld;
    } else {
      s = ce_join(ch, c->op, mat[i], mats[i], i < 3 || backward, &c->joined[i - 1]);
    }
    if (s != CLEMBED_OK) return s;
  }
}

/* After the forward's kernel: a joined output copied back into its pieces. */
static clembed_status norm_finish(norm_call *c, ce_chain *ch) {
  return c->joined[2].m ? ce_join_back(ch, &c->joined[2]) : CLEMBED_OK;
}

/* The program's options (one program serves the keys, the forward and the
 * backward's rows of a call) and the two error slots. */
/* The backward's dx_other: dx for a fold other than the position table's;
 * posg_ok: the position gradient may be summed by the rows (POSG) where the
 * shape allows, else dx for its fold. */
static clembed_status norm_prepare(norm_call *c, ce_chain *ch, clembed_dtype out_dtype, const clembed_matrix *grad,
                                   int dx_other, int posg_ok, int stats, const ce_tuning *t, int stream, int next) {
  clembed_context *ctx = c->ctx;
  const clembed_embed_options *opt = c->opt;
  const clembed_matrix *st = opt->segment_table;
  c->sids = st ? opt->segment_ids : NULL;
  /* the CPU shape: with positions shared by several sequences, a work-item
   * takes one position of several of them (each position row read once) */
  c->strided = t->norm_rows && c->p->kind != 0 && !c->p->so && opt->seq_len && c->ids->count / opt->seq_len >= 2;
  c->rows = c->strided ? (grad ? t->norm_bwd_strided_rows : t->norm_strided_rows) : t->norm_rows;
  int n = snprintf(c->opts, sizeof c->opts,
                   "-DTABLE_DT=%d -DOUT_DT=%d -DPOSITIONS=%d -DPOS_DT=%d -DSEGMENTS=%d -DSEG_DT=%d -DNORM=%d "
                   "-DHAS_W=%d -DHAS_B=%d -DDROPOUT=%d -DVEC=%u",
                   (int)c->table->dtype, (int)out_dtype, c->p->kind, c->p->pt ? (int)c->p->pt->dtype : 0,
                   st != NULL, st ? (int)st->dtype : 0, (int)opt->norm.kind,
                   opt->norm.kind != CLEMBED_NORM_NONE && opt->norm.weight, opt->norm.kind == CLEMBED_NORM_LAYER && opt->norm.bias,
                   opt->dropout > 0.0f, t->embed_vec);
  ce_rowwise_option(c->opts, sizeof c->opts, c->table->dtype, c->table->cols, c->ctx->exact_div);
  n = (int)strlen(c->opts);
  /* the CPU shape keeps its rows' x (and the backward's gradient) aside when
   * one fits in the scratch, and reads as many side by side as fit (each row
   * rounded up to a vector and, with more than one, a vector more: the
   * kernel's xst_), within norm_side_cols but two where two fit, at most the
   * item's tokens: a power of two */
  unsigned scratch = 0, side = 1;
  size_t row = (c->table->cols + t->embed_vec - 1) / t->embed_vec * t->embed_vec;
  if (c->rows && opt->norm.kind != CLEMBED_NORM_NONE && row <= t->norm_scratch_cols) {
    scratch = t->norm_scratch_cols;
    while (side * 2 <= c->rows && side * 2 * (row + t->embed_vec) <= scratch &&
           (side < 2 || !t->norm_side_cols || side * 2 * (row + t->embed_vec) <= t->norm_side_cols))
      side *= 2;
  }
  if (c->rows)
    n += snprintf(c->opts + n, sizeof c->opts - (size_t)n,
                  " -DROWS=%u -DSTREAM=%d -DNORM_NEXT=%d -DSCRATCH=%u -DSIDE=%u", c->rows, stream, next, scratch, side);
  /* the forward's kernel: the CPU shape's rows side by side from the scratch where it keeps them */
  c->fwd_kernel = !c->rows ? "ce_norm" : scratch ? "ce_norm_rows_side" : "ce_norm_rows";
  /* the position gradient in the strided items: every position's tokens in one item */
  c->posg = posg_ok && t->norm_sums && c->strided && scratch && c->ids->count <= (size_t)c->rows * opt->seq_len;
  c->dx = dx_other || (posg_ok && !c->posg);
  /* the backward's weight and bias sums: up to norm_params_cols columns per CPU work-item, one per GPU one */
  unsigned params_cols = c->rows ? t->norm_params_cols : 1;
  c->params_kernel = params_cols > 1 ? "ce_norm_params_block" : "ce_norm_params";
  if (grad)
    snprintf(c->opts + n, sizeof c->opts - (size_t)n, " -DGRAD_DT=%d -DDX=%d -DSTATS=%d -DPOSG=%d -DNORM_SUMS=%d -DNORM_PARAMS_COLS=%u",
             (int)grad->dtype, c->dx, stats, c->posg, t->norm_sums != 0, params_cols);
  /* the error slots (before fit_pieces, whose gather reports into the first) */
  c->rec = (ce_record){CE_NO_SLOT, CE_FAMILY_NORM, c->opts, c->ids, c->p->so, opt->seq_len};
  c->srec = (ce_record){CE_NO_SLOT, CE_FAMILY_NORM, c->opts, c->sids, NULL, 0};
  clembed_status s = ce_slot_room(ctx, 2); /* (the ids' slot not read aside before the kernels) */
  if (s == CLEMBED_OK) s = ce_embed_slot(ctx, c->op, c->table, c->ids, opt, c->p, &c->rec.slot);
  if (s == CLEMBED_OK && c->sids && c->ids->count) {
    size_t types = st->rows;
    if (opt->policy == CLEMBED_INDEX_CHECK || opt->policy == CLEMBED_INDEX_WRAP ||
        (opt->policy == CLEMBED_INDEX_CLAMP && types == 0)) {
      ce_slot_info info = {c->op,   "position_table", opt->policy == CLEMBED_INDEX_WRAP, types, 0, 0, 0, 0, 0,
                           "segment_ids", 0, 0, 0, 0, 0, 0, 0, 0};
      s = ce_slot_reserve(ctx, &info, &c->srec.slot);
    }
  }
  if (s == CLEMBED_OK) s = fit_pieces(c, ch, grad != NULL);
  if (s != CLEMBED_OK) return s;
  ce_pieces_option(c->opts, sizeof c->opts, c->tp, "table");
  ce_pieces_option(c->opts, sizeof c->opts, &c->p->pp, "ptab");
  ce_pieces_option(c->opts, sizeof c->opts, &c->sp, "stab");
  ce_pieces_option(c->opts, sizeof c->opts, c->rp, grad ? "grad" : "out");
  c->in_args = NORM_IN_ARGS + ce_pieces_extra_args(c->tp) + ce_pieces_extra_args(&c->p->pp) +
               ce_pieces_extra_args(&c->sp);
  return CLEMBED_OK;
}

/* Sets the CE_NORM_IN_ARGS of kernel k. */
static clembed_status norm_in_args(norm_call *c, cl_kernel k, const char *name) {
  clembed_context *ctx = c->ctx;
  const clembed_embed_options *opt = c->opt;
  const clembed_matrix *table = c->table, *pt = c->p->pt, *st = opt->segment_table;
  const clembed_ids *ids = c->ids, *so = c->p->so, *sid = c->sids;
  cl_mem none = NULL, idb = ids->buffer, sob = so ? so->buffer : none, sidb = sid ? sid->buffer : none;
  /* norm.weight and norm.bias: one row, so one buffer (a NULL one when absent) */
  cl_mem nwb = c->wp.piece[0].buffer, nbb = c->bp.piece[0].buffer;
  cl_ulong t_ldl = c->t_ld, t_rows = table->rows, id_off = ids->offset, n = ids->count;
  cl_ulong cols = table->cols, p_ldl = c->p->p_ld, p_rows = pt ? pt->rows : 0;
  cl_ulong seq_len = opt->seq_len, pos_offset = opt->position_offset, so_off = so ? so->offset : 0;
  cl_ulong s_ldl = c->s_ld, s_rows = st ? st->rows : 0, sid_off = sid ? sid->offset : 0;
  cl_ulong nw_off = c->wp.piece[0].offset, nb_off = c->bp.piece[0].offset;
  cl_int id64 = ids->type == CLEMBED_I64, so64 = so && so->type == CLEMBED_I64, has_so = so != NULL;
  cl_int sid64 = sid && sid->type == CLEMBED_I64, has_sid = sid != NULL;
  cl_int policy = (cl_int)c->policy, seg_policy = (cl_int)opt->policy;
  cl_long padding = c->padding;
  int dropout = opt->dropout > 0.0f;
  cl_float scale = opt->scale, eps = opt->norm.eps, inv_d = cols ? (float)(1.0 / (double)cols) : 0.0f;
  cl_float drop = opt->dropout, keep = dropout ? 1.0f / (1.0f - opt->dropout) : 1.0f;
  cl_uint seed_lo = (cl_uint)opt->dropout_seed, seed_hi = (cl_uint)(opt->dropout_seed >> 32);
  cl_uint slot = c->rec.slot == CE_NO_SLOT ? 0 : c->rec.slot, sslot = c->srec.slot == CE_NO_SLOT ? 0 : c->srec.slot;
  return ce_set_args(ctx, k, name, CE_PIECES(c->tp), CE_ARG(t_ldl), CE_ARG(t_rows), CE_ARG(idb), CE_ARG(idb),
                     CE_ARG(id_off), CE_ARG(id64), CE_ARG(n), CE_ARG(cols), CE_ARG(scale), CE_ARG(policy),
                     CE_ARG(seg_policy), CE_ARG(padding), CE_ARG(c->p->freq), CE_PIECES(&c->p->pp), CE_ARG(p_ldl), CE_ARG(p_rows),
                     CE_ARG(seq_len), CE_ARG(pos_offset), CE_ARG(sob), CE_ARG(sob), CE_ARG(so_off), CE_ARG(so64),
                     CE_ARG(has_so), CE_PIECES(&c->sp), CE_ARG(s_ldl), CE_ARG(s_rows), CE_ARG(sidb),
                     CE_ARG(sidb), CE_ARG(sid_off), CE_ARG(sid64), CE_ARG(has_sid), CE_ARG(nwb), CE_ARG(nw_off),
                     CE_ARG(nbb), CE_ARG(nb_off), CE_ARG(eps), CE_ARG(inv_d),
                     CE_ARG(drop), CE_ARG(seed_lo), CE_ARG(seed_hi), CE_ARG(keep), CE_ARG(ctx->errbuf), CE_ARG(slot),
                     CE_ARG(sslot), CE_END);
}

/* ce_norm_keys over the tokens: checks every id, position and segment id, and
 * writes the position and segment keys asked for (NULL: not wanted). */
static clembed_status norm_keys(norm_call *c, ce_chain *ch, cl_mem pos_keys, cl_mem seg_keys) {
  clembed_status status = CLEMBED_OK;
  cl_kernel k;
  cl_mem none = NULL, pk = pos_keys ? pos_keys : none, sk = seg_keys ? seg_keys : none;
  cl_int want_pos = pos_keys != NULL, want_seg = seg_keys != NULL;
  CHECK(ce_kernel(c->ctx, CE_FAMILY_NORM, c->opts, "ce_norm_keys", &k));
  CHECK(norm_in_args(c, k, "ce_norm_keys"));
  CHECK(ce_set_args_at(c->ctx, k, "ce_norm_keys", c->in_args, CE_ARG(pk), CE_ARG(want_pos), CE_ARG(sk),
                       CE_ARG(want_seg), CE_END));
  CHECK(ce_chain_1d(ch, k, "ce_norm_keys", c->ids->count, 0));
cleanup:
  return status;
}

/* A row kernel in its shape: the CPU shape's work-items of c->rows tokens
 * (its last argument, `last`, says whether they are strided), or the GPU
 * shape's groups of (lx, ly) work-items (lx = 32, or the largest power of two
 * the kernel allows; its last argument: `floats` of local memory per token). */
static clembed_status norm_launch(norm_call *c, ce_chain *ch, cl_kernel k, const char *name, unsigned floats,
                                  cl_uint last) {
  clembed_context *ctx = c->ctx;
  const ce_tuning *t = ctx->tune;
  size_t n = c->ids->count;
  if (c->rows) {
    size_t items = n / c->rows + (n % c->rows != 0);
    cl_int strided = c->strided;
    clembed_status s = ce_set_args_at(ctx, k, name, last, CE_ARG(strided), CE_END);
    if (c->strided) { /* seq_len items for each `rows` sequences */
      size_t len = c->opt->seq_len, nseq = n / len + (n % len != 0);
      items = (nseq / c->rows + (nseq % c->rows != 0)) * len;
    }
    return s != CLEMBED_OK ? s : ce_chain_1d(ch, k, name, items, CE_LOCAL_ROWS);
  }
  size_t wg = 0, lx = 1, ly = 1;
  if (clGetKernelWorkGroupInfo(k, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, NULL) != CL_SUCCESS || !wg)
    wg = ctx->max_work_group;
  while (lx * 2 <= 32 && lx * 2 <= wg && lx * 2 <= ctx->max_items[0]) lx *= 2;
  while (ly * 2 <= t->norm_group_rows && lx * ly * 2 <= wg && ly * 2 <= ctx->max_items[1] && ly < n) ly *= 2;
  clembed_status s = ce_set_args_at(ctx, k, name, last, CE_LOCAL_ARG(ly * floats * sizeof(float)), CE_END);
  return s != CLEMBED_OK ? s : ce_chain_2d_local(ch, k, name, lx, n, lx, ly);
}

clembed_status ce_norm_forward(clembed_context *ctx, ce_chain *ch, const clembed_matrix *table, ce_pieces *tp,
                               const clembed_ids *ids, const clembed_embed_options *opt, ce_embed_pos *p,
                               cl_long padding, clembed_matrix *out, ce_pieces *op, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  const ce_tuning *t = ctx->tune;
  norm_call c;
  cl_kernel k;
  CHECK(norm_init(&c, ctx, ctx->op, table, tp, ids, opt, p, padding, out, op));
  /* an output larger than the device's cache goes out with streaming stores */
  size_t out_bytes = ids->count * table->cols * clembed_dtype_size(out->dtype);
  int stream = t->norm_rows && ce_stream_output(ctx, out_bytes);
  CHECK(norm_prepare(&c, ch, out->dtype, NULL, 0, 0, 0, t, stream, ctx->prefetch && t->norm_next));
  if (ids->count && table->cols == 0) {
    CHECK(norm_keys(&c, ch, NULL, NULL)); /* no column to write: the ids are still checked */
  } else if (ids->count) {
    const char *name = c.fwd_kernel;
    cl_ulong o_ldl = op->ld;
    CHECK(ce_kernel(ctx, CE_FAMILY_NORM, c.opts, name, &k));
    CHECK(norm_in_args(&c, k, name));
    CHECK(ce_set_args_at(ctx, k, name, c.in_args, CE_PIECES(op), CE_ARG(o_ldl), CE_END));
    CHECK(norm_launch(&c, ch, k, name, 32, c.in_args + 3 + ce_pieces_extra_args(op)));
    CHECK(norm_finish(&c, ch));
  }
  CHECK(ce_chain_record(ch, &c.srec));
  CHECK(ce_chain_close_checked(ch, &c.rec, event));
cleanup:
  norm_release(&c);
  return status;
}

/* ------------------------------------------------------------- backward */

/* A gradient: F32, rows x cols; `what` names it ("grads.table"). */
static clembed_status check_grad(clembed_context *ctx, const clembed_matrix *g, const char *what, size_t rows,
                                 size_t cols) {
  clembed_status status = CLEMBED_OK;
  CHECK(check_any(ctx, g, what));
  if (g->dtype != CLEMBED_F32 || g->rows != rows || g->cols != cols)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, what, -1, (int64_t)g->rows,
             "clembed_embed_backward: %s must be %zu x %zu F32 (it is %zu x %zu %s)", what, rows, cols,
             g->rows, g->cols, ce_dtype_name(g->dtype));
cleanup:
  return status;
}

/* A gradient asked for a part the forward does not have. */
static clembed_status no_part(clembed_context *ctx, const char *what, const char *part) {
  return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, what, -1, 0,
                     "clembed_embed_backward: %s is asked but the forward has no %s", what, part);
}

static clembed_status check_grads(clembed_context *ctx, const clembed_matrix *table, const clembed_embed_options *opt,
                                  const clembed_embed_grads *g) {
  clembed_status status = CLEMBED_OK;
  const clembed_norm *nm = &opt->norm;
  if (!g) FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "grads", -1, 0, "clembed_embed_backward: grads is NULL");
  if (g->table) CHECK(check_grad(ctx, g->table, "grads.table", table->rows, table->cols));
  if (g->position_table && opt->positions != CLEMBED_POSITIONS_TABLE)
    CHECK(no_part(ctx, "grads.position_table", "position_table (positions is not CLEMBED_POSITIONS_TABLE)"));
  if (g->position_table)
    CHECK(check_grad(ctx, g->position_table, "grads.position_table", opt->position_table->rows, table->cols));
  if (g->segment_table && !opt->segment_table) CHECK(no_part(ctx, "grads.segment_table", "segment_table"));
  if (g->segment_table)
    CHECK(check_grad(ctx, g->segment_table, "grads.segment_table", opt->segment_table->rows, table->cols));
  if (g->norm_weight && (nm->kind == CLEMBED_NORM_NONE || !nm->weight))
    CHECK(no_part(ctx, "grads.norm_weight", "norm.weight"));
  if (g->norm_weight) CHECK(check_grad(ctx, g->norm_weight, "grads.norm_weight", 1, table->cols));
  if (g->norm_bias && (nm->kind != CLEMBED_NORM_LAYER || !nm->bias)) CHECK(no_part(ctx, "grads.norm_bias", "norm.bias"));
  if (g->norm_bias) CHECK(check_grad(ctx, g->norm_bias, "grads.norm_bias", 1, table->cols));
cleanup:
  return status;
}

/* A temporary of `count` ids of `type` (its buffer released by the caller). */
static clembed_status temp_ids(clembed_context *ctx, size_t count, clembed_index_type type, const char *what,
                               clembed_ids *ids) {
  *ids = (clembed_ids){NULL, 0, count, type};
  return ce_buffer(ctx, CE_BUFFER_TEMP, count * ce_index_size(type), NULL, what, &ids->buffer);
}

/* The backward's temporaries (dx: n x cols; the rows' stats: n x 4), kept on the context from
 * one call to the next where the queue is in order (it orders a call's
 * writes after the last call's reads), and grown when a call needs more:
 * a training loop then neither allocates them nor has the system zero their
 * pages at every step. */
typedef struct norm_space {
  cl_mem m[2];
  size_t bytes[2];
} norm_space;
static const char space_key = 0;

static void space_release(clembed_context *ctx, void *data) {
  (void)ctx;
  norm_space *w = data;
  for (int k = 0; k < 2; k++)
    if (w->m[k]) clReleaseMemObject(w->m[k]);
  free(w);
}

/* A dense n x cols F32 temporary: the context's workspace `which`, or on an
 * out-of-order queue a buffer of its own (*owned: the caller releases it). */
static clembed_status temp_matrix(clembed_context *ctx, int which, size_t n, size_t cols, const char *what,
                                  clembed_matrix *m, int *owned) {
  clembed_status status = CLEMBED_OK;
  size_t bytes = n * cols * sizeof(float);
  norm_space *w = ce_cache_find(ctx, &space_key);
  *m = (clembed_matrix){NULL, 0, n, cols, cols, CLEMBED_F32};
  *owned = !ctx->in_order;
  if (*owned) return ce_buffer(ctx, CE_BUFFER_TEMP, bytes, NULL, what, &m->buffer);
  if (!w) {
    if (!(w = calloc(1, sizeof *w))) FAIL(CLEMBED_ERR_OUT_OF_MEMORY, "%s: out of host memory", ctx->op);
    if ((status = ce_cache_add(ctx, &space_key, w, space_release)) != CLEMBED_OK) {
      free(w);
      goto cleanup;
    }
  }
  if (w->bytes[which] < bytes) {
    if (w->m[which]) clReleaseMemObject(w->m[which]);
    w->m[which] = NULL;
    w->bytes[which] = 0;
    CHECK(ce_buffer(ctx, CE_BUFFER_TEMP, bytes, NULL, what, &w->m[which]));
    w->bytes[which] = bytes;
  }
  m->buffer = w->m[which];
cleanup:
  return status;
}

/* One fold of contributions `src` (ids->count x cols; its dropout replayed
 * when bo says so) into `target`, as the chain's next command. */
static clembed_status fold(ce_chain *ch, const clembed_matrix *src, const clembed_ids *keys,
                           const clembed_backward_options *bo, clembed_matrix *target) {
  static const ce_step step = {"clembed_embed_backward", CE_STORE_ACCUMULATE, 0.0f, 0, NULL, NULL, {0, 0, 0, 0}};
  cl_event ev = NULL;
  clembed_status s = ce_segment_step(ch->ctx, &step, src, keys, bo, target, ce_chain_nwait(ch), ce_chain_wait(ch), &ev);
  ce_chain_adopt(ch, ev);
  return s;
}

typedef struct bwd_temps {
  clembed_ids pos_keys, seg_keys;
  clembed_matrix dx, stats;
  int own_dx, own_stats; /* not the context's workspace */
} bwd_temps;

static void bwd_temps_release(bwd_temps *t) {
  clembed_ids_release(&t->pos_keys);
  clembed_ids_release(&t->seg_keys);
  if (t->own_dx) clembed_matrix_release(&t->dx);
  if (t->own_stats) clembed_matrix_release(&t->stats);
}

/* ce_norm_params: grads' norm_weight and (seg: in place of its fold)
 * segment_table, from grad_out and the rows recomputed with their stats, and
 * norm_bias (grad_out with its dropout replayed), accumulated over every token
 * in ascending order. */
static clembed_status norm_params(norm_call *c, ce_chain *ch, ce_pieces *gp, const clembed_matrix *stats,
                                  const clembed_embed_grads *grads, int seg) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = c->ctx;
  const char *name = c->params_kernel;
  ce_pieces wp, bp, sp;
  cl_kernel k;
  cl_mem none = NULL, acc = NULL;
  ce_pieces_none(&wp);
  ce_pieces_none(&bp);
  ce_pieces_none(&sp);
  if (grads->norm_weight) CHECK(ce_check_pieces(ctx, grads->norm_weight, "grads.norm_weight", 0, &wp));
  if (grads->norm_bias) CHECK(ce_check_pieces(ctx, grads->norm_bias, "grads.norm_bias", 0, &bp));
  if (seg) CHECK(ce_check_pieces(ctx, grads->segment_table, "grads.segment_table", 0, &sp));
  {
    const ce_tuning *t = ctx->tune;
    /* CPU: the columns in as few blocks as keep every compute unit busy, whole vectors */
    size_t cols = c->table->cols, vec = t->embed_vec, pw = 1;
    if (c->rows) {
      pw = (cols + ctx->units - 1) / ctx->units;
      pw = (pw + vec - 1) / vec * vec;
      if (pw > t->norm_params_cols) pw = t->norm_params_cols;
    }
    cl_ulong pwl = pw;
    cl_ulong g_ldl = gp->ld, w_off = grads->norm_weight ? wp.piece[0].offset : 0;
    cl_ulong b_off = grads->norm_bias ? bp.piece[0].offset : 0;
    cl_ulong s_off = seg ? sp.piece[0].offset : 0, s_ldl = seg ? sp.ld : 0;
    cl_mem st = grads->norm_weight || seg ? stats->buffer : none;
    cl_mem wb = grads->norm_weight ? wp.piece[0].buffer : none, bb = grads->norm_bias ? bp.piece[0].buffer : none;
    cl_mem sb = seg ? sp.piece[0].buffer : none;
    cl_int want_w = grads->norm_weight != NULL, want_b = grads->norm_bias != NULL, want_s = seg;
    CHECK(ce_kernel(ctx, CE_FAMILY_NORM, c->opts, name, &k));
    CHECK(norm_in_args(c, k, name));
    /* the tokens in one launch, or (a device with a loop limit) in launches
     * whose loops stay below it, the sums carried in acc from one to the next */
    size_t items = (cols + pw - 1) / pw, n = c->ids->count, per = n ? n : 1;
    /* loop steps a token (twice the kernel's own loops: a block dtype's loads may loop too), and the rest */
    size_t each = 2 * (c->rows ? 2 + pw / vec + vec : pw + 1), margin = 8 * (pw + vec) + 256;
    if (t->loop_limit && n * each + margin > t->loop_limit) {
      per = t->loop_limit > margin + each ? (t->loop_limit - margin) / each : 1;
      size_t acc_floats = (2 + NORM_SMAX) * cols + items * NORM_SMAX;
      CHECK(ce_buffer(ctx, CE_BUFFER_TEMP, acc_floats * sizeof(float), NULL, "the norm's carried sums", &acc));
    }
    for (size_t t0 = 0; t0 < n || t0 == 0; t0 += per) {
      cl_ulong t0l = t0, t1l = t0 + per < n ? t0 + per : n;
      cl_int first = t0 == 0, last = t0 + per >= n;
      CHECK(ce_set_args_at(ctx, k, name, c->in_args, CE_PIECES(gp), CE_ARG(g_ldl), CE_ARG(st), CE_ARG(wb),
                           CE_ARG(w_off), CE_ARG(want_w), CE_ARG(bb), CE_ARG(b_off), CE_ARG(want_b), CE_ARG(sb),
                           CE_ARG(s_off), CE_ARG(s_ldl), CE_ARG(want_s), CE_ARG(pwl), CE_ARG(t0l), CE_ARG(t1l),
                           CE_ARG(acc), CE_ARG(first), CE_ARG(last), CE_END));
      CHECK(ce_chain_1d(ch, k, name, items, c->rows ? CE_LOCAL_ROWS : 0));
      if (last) break;
    }
  }
cleanup:
  if (acc) clReleaseMemObject(acc); /* (the launches keep it until they are done) */
  ce_pieces_release(&wp);
  ce_pieces_release(&bp);
  ce_pieces_release(&sp);
  return status;
}

/* One clembed_embed_backward call: its arguments as read and checked, the
 * steps' decisions, the norm's call (its pointers lead back here: the call is
 * never copied), the temporaries and the chain. */
typedef struct bwd_call {
  clembed_context *ctx;
  const clembed_matrix *grad_out, *table;
  const clembed_ids *ids;
  clembed_embed_options o;          /* opt as far as its struct_size goes (NULL: the defaults) */
  clembed_embed_grads g;            /* grads as far as its struct_size goes */
  const clembed_embed_options *opt; /* &o */
  const clembed_embed_grads *grads; /* &g, NULL for grads NULL (refused by check_grads) */
  cl_long padding;
  ce_embed_pos p;
  ce_pieces tp, gp;
  norm_call c;
  bwd_temps tmp;
  ce_chain ch;
  int norm;       /* a LayerNorm or RMSNorm */
  int seg_params; /* segment_table's gradient summed by ce_norm_params (step 3), not by a fold */
  int want_stats; /* the rows' stats, for step 3 */
} bwd_call;

/* The call's arguments: opt and grads read, then checked as the forward
 * checks them, and the gradients asked for against the forward's parts. */
static clembed_status bwd_check(bwd_call *b, const clembed_embed_options *opt, const clembed_embed_grads *grads,
                                cl_uint nwait, const cl_event *wait) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = b->ctx;
  const clembed_ids *ids = b->ids;
  int layer;
  CHECK(ce_struct_read(ctx, NULL, "opt", -1, &ce_embed_options_layout, opt, &b->o)); /* NULL: the defaults */
  b->opt = &b->o;
  CHECK(ce_struct_read(ctx, NULL, "grads", -1, &ce_embed_grads_layout, grads, &b->g));
  if (grads) b->grads = &b->g; /* NULL: refused by check_grads */
  if (b->o.remap)
    FAIL_ARG(CLEMBED_ERR_UNSUPPORTED, "remap", -1, (int64_t)b->o.remap->count,
             "%s: remap: a pruned table is served, not trained", ctx->op);
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_embed_check(ctx, b->table, ids, b->opt, b->grad_out, "grad_out", &b->tp, &b->gp, &b->padding));
  /* padding_keeps_row: the rows are recomputed with the padding row as stored; the
   * table's fold below still gives it no gradient (bo.padding_idx) */
  if (b->opt->padding_keeps_row) b->padding = -1;
  if ((uint64_t)ids->count >= 0xFFFFFFFFu)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "ids", -1, (int64_t)ids->count,
             "clembed_embed_backward: %zu ids; at most 4294967294 per call", ids->count);
  CHECK(ce_norm_check(ctx, b->table, ids, b->opt, &layer));
  CHECK(ce_embed_positions(ctx, b->table, ids, b->opt, &b->p));
  CHECK(check_grads(ctx, b->table, b->opt, b->grads));
  if (b->grads->table || b->grads->position_table || b->grads->segment_table) /* (folded: before any is written) */
    CHECK(ce_fold_fits(ctx, ctx->op, "ids", ids->count));
cleanup:
  return status;
}

/* Which step sums which gradient (steps 2 to 4 of the file's comment), and
 * the norm's call prepared for them (its program's options, its slots). */
static clembed_status bwd_decide(bwd_call *b) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = b->ctx;
  const clembed_embed_options *opt = b->opt;
  const clembed_embed_grads *grads = b->grads;
  const ce_tuning *t = ctx->tune;
  size_t n = b->ids->count, cols = b->table->cols;
  int norm = b->norm = opt->norm.kind != CLEMBED_NORM_NONE;
  /* with a norm, a segment table of a few rows in one piece has its gradient
   * summed by ce_norm_params (with the norm's), not by a fold */
  int seg_params = t->norm_sums && norm && cols && grads->segment_table && opt->segment_table->rows <= NORM_SMAX;
  if (seg_params) {
    ce_pieces sgp;
    CHECK(ce_check_pieces(ctx, grads->segment_table, "grads.segment_table", 0, &sgp));
    seg_params = sgp.count == 1;
    ce_pieces_release(&sgp);
  }
  b->seg_params = seg_params;
  /* a position gradient in one buffer may be summed by the rows (norm_prepare decides) */
  int posg_ok = norm && cols && grads->position_table;
  if (posg_ok) {
    ce_pieces pgp;
    CHECK(ce_check_pieces(ctx, grads->position_table, "grads.position_table", 0, &pgp));
    posg_ok = pgp.count == 1;
    ce_pieces_release(&pgp);
  }
  int dx_other = norm && cols &&
                 (grads->table || (grads->position_table && !posg_ok) || (grads->segment_table && !seg_params));
  int want_stats = b->want_stats = cols && (grads->norm_weight || seg_params);
  CHECK(norm_init(&b->c, ctx, ctx->op, b->table, &b->tp, b->ids, opt, &b->p, b->padding, b->grad_out, &b->gp));
  /* dx larger than the device's cache goes out with streaming stores */
  int stream = t->norm_rows && ce_stream_output(ctx, n * cols * sizeof(float));
  CHECK(norm_prepare(&b->c, &b->ch, CLEMBED_F32, b->grad_out, dx_other, posg_ok, want_stats, t, stream,
                     ctx->prefetch && t->norm_next));
cleanup:
  return status;
}

/* Step 2, with a norm: dx (and the rows' stats) row by row; the CPU shape's
 * strided items also sum the position gradient (POSG). */
static clembed_status bwd_rows(bwd_call *b) {
  clembed_status status = CLEMBED_OK;
  clembed_context *ctx = b->ctx;
  norm_call *c = &b->c;
  size_t n = b->ids->count, cols = b->table->cols;
  int want_dx = c->dx, want_stats = b->want_stats;
  const char *name = c->rows ? "ce_norm_bwd_rows" : "ce_norm_bwd";
  cl_kernel k;
  cl_mem none = NULL;
  cl_ulong g_ldl = b->gp.ld;
  if (want_dx) CHECK(temp_matrix(ctx, 0, n, cols, "dx", &b->tmp.dx, &b->tmp.own_dx));
  if (want_stats) CHECK(temp_matrix(ctx, 1, n, 4, "the rows' stats", &b->tmp.stats, &b->tmp.own_stats));
  cl_mem dxb = want_dx ? b->tmp.dx.buffer : none, stb = want_stats ? b->tmp.stats.buffer : none;
  cl_uint last = c->in_args + 5 + ce_pieces_extra_args(&b->gp);
  CHECK(ce_kernel(ctx, CE_FAMILY_NORM, c->opts, name, &k));
  CHECK(norm_in_args(c, k, name));
  CHECK(ce_set_args_at(ctx, k, name, c->in_args, CE_PIECES(&b->gp), CE_ARG(g_ldl), CE_ARG(dxb), CE_ARG(stb), CE_END));
  if (c->rows) { /* the CPU shape: the position gradient's buffer (POSG) */
    ce_pieces pgp;
    ce_pieces_none(&pgp);
    if (c->posg) CHECK(ce_check_pieces(ctx, b->grads->position_table, "grads.position_table", 0, &pgp));
    cl_mem pgb = c->posg ? pgp.piece[0].buffer : none;
    cl_ulong pg_off = c->posg ? pgp.piece[0].offset : 0, pg_ld = c->posg ? pgp.ld : 0;
    ce_pieces_release(&pgp);
    CHECK(ce_set_args_at(ctx, k, name, last, CE_ARG(pgb), CE_ARG(pg_off), CE_ARG(pg_ld), CE_END));
    last += 3;
  }
  CHECK(norm_launch(c, &b->ch, k, name, 2 * 32, last));
cleanup:
  return status;
}

/* Step 4, the folds: dx is grad_out with its dropout when there is no norm. */
static clembed_status bwd_folds(bwd_call *b) {
  clembed_status status = CLEMBED_OK;
  const clembed_embed_options *opt = b->opt;
  const clembed_embed_grads *grads = b->grads;
  int norm = b->norm;
  const clembed_matrix *src = norm ? &b->tmp.dx : b->grad_out;
  clembed_backward_options bo = clembed_backward_defaults(), keyed;
  bo.scale = opt->scale;
  bo.policy = opt->policy;
  bo.padding_idx = opt->padding_idx;
  if (!norm) {
    bo.dropout = opt->dropout;
    bo.dropout_seed = opt->dropout_seed;
  }
  keyed = clembed_backward_defaults(); /* resolved keys, unscaled */
  keyed.policy = CLEMBED_INDEX_ZERO;
  keyed.dropout = bo.dropout;
  keyed.dropout_seed = bo.dropout_seed;
  if (norm && !b->table->cols) src = b->grad_out; /* nothing to add: the folds only check their keys */
  if (grads->table) CHECK(fold(&b->ch, src, b->ids, &bo, grads->table));
  if (grads->position_table && !b->c.posg) CHECK(fold(&b->ch, src, &b->tmp.pos_keys, &keyed, grads->position_table));
  if (grads->segment_table && !b->seg_params)
    CHECK(fold(&b->ch, src, &b->tmp.seg_keys, &keyed, grads->segment_table));
cleanup:
  return status;
}

static clembed_status embed_backward_run(clembed_context *ctx, const clembed_matrix *grad_out,
                                         const clembed_matrix *table, const clembed_ids *ids,
                                         const clembed_embed_options *opt, const clembed_embed_grads *grads,
                                         cl_uint nwait, const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  bwd_call b;
  memset(&b, 0, sizeof b);
  b.ctx = ctx;
  b.grad_out = grad_out;
  b.table = table;
  b.ids = ids;
  b.o = clembed_embed_defaults();
  b.g = clembed_embed_grads_defaults();
  ce_pieces_none(&b.c.sp);
  ce_pieces_none(&b.c.wp);
  ce_pieces_none(&b.c.bp);
  ce_pieces_none(&b.tp);
  ce_pieces_none(&b.gp);
  ce_pieces_none(&b.p.pp);
  ce_chain_init(&b.ch, ctx, nwait, wait);
  CHECK(bwd_check(&b, opt, grads, nwait, wait));
  CHECK(bwd_decide(&b));
  grads = b.grads;
  size_t n = ids->count, cols = table->cols;
  if (n == 0) goto close;

  /* 1. the keys (and the forward's checks) */
  if (grads->position_table && !b.c.posg) CHECK(temp_ids(ctx, n, CLEMBED_I64, "position keys", &b.tmp.pos_keys));
  if (grads->segment_table && !b.seg_params) CHECK(temp_ids(ctx, n, CLEMBED_I64, "segment keys", &b.tmp.seg_keys));
  CHECK(norm_keys(&b.c, &b.ch, b.tmp.pos_keys.buffer, b.tmp.seg_keys.buffer));
  /* 2. with a norm: dx (and the rows' stats) row by row */
  if (b.c.dx || b.want_stats || b.c.posg) CHECK(bwd_rows(&b));
  /* 3. the norm's weight and bias (and the few segment rows): every token's
   * g * xh, g (and dx) summed in token order, column by column */
  if ((grads->norm_weight || grads->norm_bias || b.seg_params) && cols)
    CHECK(norm_params(&b.c, &b.ch, &b.gp, &b.tmp.stats, grads, b.seg_params));
  CHECK(ce_chain_record(&b.ch, &b.c.rec));
  CHECK(ce_chain_record(&b.ch, &b.c.srec));
  /* 4. the folds */
  CHECK(bwd_folds(&b));
close:
  CHECK(ce_chain_close(&b.ch, event));
cleanup:
  bwd_temps_release(&b.tmp); /* after enqueueing: OpenCL keeps them until the commands finish */
  ce_chain_release(&b.ch);
  norm_release(&b.c);
  ce_pieces_release(&b.tp);
  ce_pieces_release(&b.gp);
  ce_pieces_release(&b.p.pp);
  return status;
}

clembed_status clembed_embed_backward(clembed_context *ctx, const clembed_matrix *grad_out,
                                      const clembed_matrix *table, const clembed_ids *ids,
                                      const clembed_embed_options *opt, const clembed_embed_grads *grads,
                                      cl_uint nwait, const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_embed_backward");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  clembed_status status = embed_backward_run(ctx, grad_out, table, ids, opt, grads, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

/* The forward: clembed_lookup and clembed_embed. The arguments are checked,
 * the positions resolved (nothing, the cached sinusoid table, the sinusoid
 * computed per element, or a learned table), and one kernel shape chosen on
 * the host (cl/ops/forward.cl has one kernel per shape, with the same
 * arguments). With segments or a norm the call goes on in norm.c. */
#include "ops.h"
#include "../test_hooks.h"

#include <stdio.h>
#include <string.h>

clembed_embed_options clembed_embed_defaults(void) {
  clembed_embed_options o;
  memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.scale = 1.0f;
  o.policy = CLEMBED_INDEX_CHECK;
  o.padding_idx = CLEMBED_NO_PADDING;
  o.positions = CLEMBED_POSITIONS_NONE;
  o.sinusoid = clembed_sinusoid_defaults();
  o.norm = clembed_norm_defaults();
  o.padding_keeps_row = 0;
  return o;
}

typedef ce_embed_pos embed_pos;

clembed_status ce_embed_positions(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                                  const clembed_embed_options *opt, embed_pos *p) {
  clembed_status status = CLEMBED_OK;
  p->kind = (int)opt->positions;
  p->pt = NULL;
  p->cached = 0;
  p->p_ld = 0;
  p->freq = NULL;
  p->so = NULL;
  ce_pieces_none(&p->pp); /* no position table: a NULL buffer */
  switch (opt->positions) {
    case CLEMBED_POSITIONS_NONE: break;
    case CLEMBED_POSITIONS_SINUSOID: {
      CHECK(ce_sinusoid_check(ctx, &opt->sinusoid));
      /* Without per-sequence offsets the positions are [offset, offset + span):
       * read them from the context's cached table (the same float values)
       * rather than computing sin/cos per element. */
      size_t span = opt->seq_len && opt->seq_len < ids->count ? opt->seq_len : ids->count, end;
      /* positions below 2^32 (those from sequence_offsets are checked on the device) */
      if (!opt->sequence_offsets && ce_positions_past_end(opt->position_offset, span))
        FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "position_offset", -1, (int64_t)opt->position_offset,
                 "clembed_embed: position_offset %zu + %zu positions is past 2^32 (the sinusoid takes positions "
                 "below 2^32)",
                 opt->position_offset, span);
      if (!opt->sequence_offsets && !ce_add_overflows(opt->position_offset, span, &end))
        CHECK(ce_sinusoid_table(ctx, &opt->sinusoid, table->cols, end, ids->count, &p->pt));
      if (p->pt) {
        p->cached = 1;
        p->kind = (int)CLEMBED_POSITIONS_TABLE;
        CHECK(ce_check_pieces(ctx, p->pt, "sinusoid table", 0, &p->pp));
        p->p_ld = p->pp.ld;
      } else {
        CHECK(ce_sinusoid_freq(ctx, &opt->sinusoid, table->cols, &p->freq));
      }
      break;
    }
    case CLEMBED_POSITIONS_TABLE:
      p->pt = opt->position_table;
      CHECK(ce_check_pieces(ctx, p->pt, "position_table", 1, &p->pp));
      if (ce_rowwise_of((int)p->pt->dtype))
        FAIL_ARG(CLEMBED_ERR_UNSUPPORTED, "position_table", -1, (int64_t)p->pt->dtype,
                 "position_table is %s: a learned position table is F32, F16, BF16 or one of ggml's block types",
                 ce_dtype_name(p->pt->dtype));
      p->p_ld = p->pp.ld;
      if (p->pt->cols != table->cols)
        FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "position_table", -1, (int64_t)p->pt->cols,
                 "position_table has %zu cols but the table has %zu", p->pt->cols, table->cols);
      break;
    default:
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "positions", -1, (int64_t)opt->positions,
               "clembed_embed: unknown positions %d", (int)opt->positions);
  }
  p->so = opt->positions != CLEMBED_POSITIONS_NONE ? opt->sequence_offsets : NULL;
cleanup:
  return status;
}

/* The kernel shape and its range. */
typedef struct embed_shape {
  const char *name;
  unsigned rows;   /* tokens (or sequences) per work-item; 0 for the column shapes */
  unsigned ahead;  /* the row shapes: rows on whose table row is prefetched (forward.cl's EMBED_STRIDED_AHEAD; 0: none) */
  int next;        /* the row shapes side by side: the next item's rows asked for (forward.cl's EMBED_NEXT) */
  int stream, vw;
  size_t nx, ny;   /* the 2-D range, or (rows) the 1-D count ny */
} embed_shape;

static embed_shape choose_shape(const clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                                const clembed_embed_options *opt, const embed_pos *p, clembed_dtype out_dtype) {
  const ce_tuning *t = ctx->tune;
  embed_shape s = {"ce_embed", t->embed_rows, 0, 0, 0, table->cols % 4 == 0 ? 4 : 1, 0, 0};
  if (table->cols == 0) { /* no column to write, but every id and position is still checked: the
                             row shape, one token per work-item, reads them and writes nothing */
    s.rows = 1;
    s.name = "ce_embed_rows";
    s.ny = ids->count;
    return s;
  }
  /* with positions shared by several sequences, a work-item of the row shapes
   * takes one position of several sequences (each position row read once) */
  int strided = s.rows && p->kind != 0 && !p->so && opt->seq_len && ids->count / opt->seq_len >= 2;
  size_t row_bytes = clembed_dtype_row_bytes(table->dtype, table->cols);
  if (strided) s.rows = t->embed_strided_rows;
  else if (s.rows && t->embed_rows_bytes) { /* wide rows: as many as fit in embed_rows_bytes, one at least */
    size_t fit = row_bytes ? t->embed_rows_bytes / row_bytes : s.rows;
    s.rows = fit < 1 ? 1 : fit < s.rows ? (unsigned)fit : s.rows;
  }
  /* shared positions and short table rows, where the device takes prefetch
   * hints: written one after another, a later row's table row asked for
   * during each (forward.cl's EMBED_STRIDED_AHEAD) */
  if (s.rows && ctx->prefetch && strided && row_bytes <= t->embed_strided_prefetch_bytes &&
      p->kind != (int)CLEMBED_POSITIONS_SINUSOID) /* (a sinusoid computed, not cached: once per position) */
    s.ahead = t->embed_strided_ahead;
  /* rows side by side, where the device takes prefetch hints: the next
   * item's rows asked for while the item's are written */
  s.next = s.rows && !s.ahead && ctx->prefetch && t->embed_next;
  /* an output larger than the device's cache goes out with streaming stores */
  size_t out_bytes = ids->count * table->cols * clembed_dtype_size(out_dtype);
  s.stream = s.rows && ce_stream_output(ctx, out_bytes);
  s.name = strided ? "ce_embed_strided" : s.rows ? "ce_embed_rows" : s.vw == 4 ? "ce_embed_vec4" : "ce_embed";
  /* rows: 1-D, one work-item per `rows` tokens; columns: x across a row (16
   * columns per work-item with VW 4), y over the tokens. */
  s.nx = s.vw == 4 ? (table->cols / 4 + 3) / 4 : table->cols;
  s.ny = ids->count;
  if (strided && s.ny) { /* seq_len items for each `rows` sequences */
    size_t nseq = ids->count / opt->seq_len + (ids->count % opt->seq_len != 0);
    s.ny = (nseq / s.rows + (nseq % s.rows != 0)) * opt->seq_len;
  } else if (s.rows) {
    s.ny = s.ny / s.rows + (s.ny % s.rows != 0);
  }
  return s;
}

int clembed__test_lookup_rows(const clembed_context *ctx, const clembed_matrix *table, size_t n) {
  if (!ctx || !table) return -1;
  clembed_embed_options o = clembed_embed_defaults();
  clembed_ids ids = {NULL, 0, n, CLEMBED_I32};
  embed_pos p;
  memset(&p, 0, sizeof p); /* no positions */
  return (int)choose_shape(ctx, table, &ids, &o, &p, table->dtype).rows;
}

/* Reserves an error slot when the call can find a bad id or position (CLAMP
 * cannot clamp into a table of 0 rows: those ids are reported too; positions
 * are signed on the device, so an offset past 2^63 - 1 is a bad position). */
clembed_status ce_embed_slot(clembed_context *ctx, const char *op, const clembed_matrix *table,
                             const clembed_ids *ids, const clembed_embed_options *opt, const embed_pos *p,
                             cl_uint *slot) {
  *slot = CE_NO_SLOT;
  int can_fail = opt->remap || opt->policy == CLEMBED_INDEX_CHECK || opt->policy == CLEMBED_INDEX_WRAP ||
                 (opt->policy == CLEMBED_INDEX_CLAMP && table->rows == 0) || (p->pt && !p->cached) || p->so ||
                 (opt->positions != CLEMBED_POSITIONS_NONE && opt->position_offset > (size_t)INT64_MAX);
  if (!ids->count || !can_fail) return CLEMBED_OK;
  ce_slot_info info = {op, "position_table", opt->policy == CLEMBED_INDEX_WRAP, table->rows,
                       p->pt ? p->pt->rows : 0, opt->seq_len, opt->position_offset, p->so != NULL,
                       opt->positions == CLEMBED_POSITIONS_SINUSOID && !p->cached, NULL, 0, 0, 0, 0, 0, 0, 0, 0};
  ce_slot_remap(&info, opt->remap, opt->policy, table->rows);
  return ce_slot_reserve(ctx, &info, slot);
}

/* The arguments every shape takes (cl/ops/forward.cl's CE_EMBED_ARGS). */
static clembed_status embed_args(clembed_context *ctx, cl_kernel k, const char *name, const clembed_matrix *table,
                                 const ce_pieces *tp, const clembed_ids *ids, const clembed_embed_options *opt,
                                 const embed_pos *p, const ce_pieces *op, cl_long padding, cl_uint slot) {
  const clembed_matrix *pt = p->pt;
  const clembed_ids *so = p->so;
  cl_mem none = NULL, idb = ids->buffer, sob = so ? so->buffer : none;
  cl_ulong t_ldl = tp->ld, t_rows = table->rows, id_off = ids->offset, n = ids->count;
  cl_ulong o_ldl = op->ld, cols = table->cols;
  cl_ulong p_ldl = p->p_ld, p_rows = pt ? pt->rows : 0;
  cl_ulong seq_len = opt->seq_len, pos_offset = opt->position_offset, so_off = so ? so->offset : 0;
  cl_int id64 = ids->type == CLEMBED_I64, so64 = so && so->type == CLEMBED_I64, has_so = so != NULL;
  cl_int policy = (cl_int)opt->policy;
  int dropout = opt->dropout > 0.0f;
  cl_float scale = opt->scale, drop = opt->dropout, keep = dropout ? 1.0f / (1.0f - opt->dropout) : 1.0f;
  cl_uint seed_lo = (cl_uint)opt->dropout_seed, seed_hi = (cl_uint)(opt->dropout_seed >> 32);
  cl_uint slot_arg = slot == CE_NO_SLOT ? 0 : slot;
  cl_mem rmb = opt->remap ? opt->remap->buffer : none;
  cl_ulong rm_off = opt->remap ? opt->remap->offset : 0, rm_rows = opt->remap ? opt->remap->count : 0;
  cl_int rm64 = opt->remap && opt->remap->type == CLEMBED_I64;
  return ce_set_args(ctx, k, name, CE_PIECES(tp), CE_ARG(t_ldl), CE_ARG(t_rows), CE_ARG(idb), CE_ARG(idb),
                     CE_ARG(id_off), CE_ARG(id64), CE_ARG(n), CE_PIECES(op), CE_ARG(o_ldl), CE_ARG(cols),
                     CE_ARG(scale), CE_ARG(policy), CE_ARG(padding), CE_ARG(p->freq), CE_PIECES(&p->pp),
                     CE_ARG(p_ldl), CE_ARG(p_rows), CE_ARG(seq_len), CE_ARG(pos_offset),
                     CE_ARG(sob), CE_ARG(sob), CE_ARG(so_off), CE_ARG(so64), CE_ARG(has_so), CE_ARG(drop),
                     CE_ARG(seed_lo), CE_ARG(seed_hi), CE_ARG(keep), CE_ARG(ctx->errbuf), CE_ARG(slot_arg),
                     CE_ARG(rmb), CE_ARG(rmb), CE_ARG(rm_off), CE_ARG(rm64), CE_ARG(rm_rows), CE_END);
}

clembed_status ce_embed_check(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                              const clembed_embed_options *opt, const clembed_matrix *rows, const char *what,
                              ce_pieces *tp, ce_pieces *rp, cl_long *padding) {
  clembed_status status = CLEMBED_OK;
  CHECK(ce_check_pieces(ctx, table, "table", 1, tp));
  CHECK(ce_check_ids(ctx, ids, "ids"));
  CHECK(ce_check_pieces(ctx, rows, what, 0, rp));
  if (rows->rows != ids->count || rows->cols != table->cols)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, what, -1, (int64_t)rows->rows,
             "%s is %zu x %zu but %zu ids of a table with %zu cols need %zu x %zu", what, rows->rows, rows->cols,
             ids->count, table->cols, ids->count, table->cols);
  CHECK(ce_check_common(ctx, ctx->op, opt->policy, opt->dropout, ids->count, opt->seq_len,
                        opt->sequence_offsets));
  if (opt->remap) { /* a pruned table (include/clembed.h, "Pruned tables"): the lookup's, not the layer's */
    CHECK(ce_check_ids(ctx, opt->remap, "remap"));
    if (opt->segment_table || opt->norm.kind != CLEMBED_NORM_NONE)
      FAIL_ARG(CLEMBED_ERR_UNSUPPORTED, "remap", -1, (int64_t)opt->remap->count,
               "%s: remap (a pruned table) is for the lookup alone, not with a segment_table or a norm", ctx->op);
  }
  /* padding_idx is an id: of the unpruned table with a remap */
  CHECK(ce_padding_of(ctx, opt->padding_idx, opt->remap ? opt->remap->count : table->rows, opt->remap != NULL,
                      ctx->op, padding));
  if (opt->padding_keeps_row != 0 && opt->padding_keeps_row != 1)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "padding_keeps_row", -1, opt->padding_keeps_row,
             "%s: padding_keeps_row is %d; 0 (the padding row counts as zero) or 1 (read as stored)", ctx->op,
             opt->padding_keeps_row);
cleanup:
  return status;
}

static clembed_status embed_run(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                                const clembed_embed_options *opt, clembed_matrix *out, cl_uint nwait,
                                const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  clembed_embed_options o = clembed_embed_defaults();
  cl_long padding;
  cl_kernel k;
  char opts[512];
  embed_pos p;
  ce_pieces tp, op;
  ce_chain ch;
  ce_chain_init(&ch, ctx, nwait, wait);
  ce_pieces_none(&tp);
  ce_pieces_none(&op);
  ce_pieces_none(&p.pp);
  CHECK(ce_struct_read(ctx, NULL, "opt", -1, &ce_embed_options_layout, opt, &o)); /* NULL: the defaults */
  opt = &o;
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_embed_check(ctx, table, ids, opt, out, "out", &tp, &op, &padding));
  if (opt->padding_keeps_row) padding = -1; /* the padding id's row is read as stored (it gets no gradient) */
  int layer; /* segments or a norm: the layer of norm.c */
  CHECK(ce_norm_check(ctx, table, ids, opt, &layer));
  CHECK(ce_embed_positions(ctx, table, ids, opt, &p));
  if (layer) {
    CHECK(ce_norm_forward(ctx, &ch, table, &tp, ids, opt, &p, padding, out, &op, event));
    goto cleanup;
  }
  embed_shape sh = choose_shape(ctx, table, ids, opt, &p, out->dtype);
  int n = snprintf(opts, sizeof opts,
                   "-DTABLE_DT=%d -DOUT_DT=%d -DPOSITIONS=%d -DPOS_DT=%d -DDROPOUT=%d -DREMAP=%d -DVEC=%u",
                   (int)table->dtype, (int)out->dtype, p.kind, p.pt ? (int)p.pt->dtype : 0, opt->dropout > 0.0f,
                   opt->remap != NULL, ctx->tune->embed_vec);
  ce_rowwise_option(opts, sizeof opts, table->dtype, tp.ld, ctx->exact_div);
  n = (int)strlen(opts);
  /* a same-dtype F16 or BF16 lookup: the row shapes copy the 16-bit words (forward.cl's COPY) */
  int copy = table->dtype == out->dtype && (table->dtype == CLEMBED_F16 || table->dtype == CLEMBED_BF16) &&
             opt->scale == 1.0f && p.kind == 0 && !(opt->dropout > 0.0f);
  if (sh.rows)
    snprintf(opts + n, sizeof opts - (size_t)n, " -DROWS=%u -DSTREAM=%d -DCOPY=%d -DEMBED_STRIDED_AHEAD=%u -DEMBED_NEXT=%d", sh.rows,
             sh.stream, copy, sh.ahead, sh.next);
  /* split matrices: a launch per window of their pieces (usually one) */
  ce_pieces *mats[3] = {&tp, &p.pp, &op};
  CHECK(ce_pieces_plan(ctx, ctx->op, mats, 3));
  ce_pieces_option(opts, sizeof opts, &tp, "table");
  ce_pieces_option(opts, sizeof opts, &p.pp, "ptab");
  ce_pieces_option(opts, sizeof opts, &op, "out");
  CHECK(ce_kernel(ctx, CE_FAMILY_FORWARD, opts, sh.name, &k));
  ce_record rec = {CE_NO_SLOT, CE_FAMILY_FORWARD, opts, ids, p.so, opt->seq_len};
  CHECK(ce_embed_slot(ctx, ctx->op, table, ids, opt, &p, &rec.slot));
  do {
    CHECK(embed_args(ctx, k, sh.name, table, &tp, ids, opt, &p, &op, padding, rec.slot));
    if (sh.rows && sh.ny)
      CHECK(ce_chain_1d(&ch, k, sh.name, sh.ny, ce_rows_local(ctx, k, ctx->tune->embed_local)));
    else
      CHECK(ce_chain_2d(&ch, k, sh.name, sh.rows ? 1 : sh.nx, sh.ny));
  } while (ce_pieces_next(mats, 3));
  CHECK(ce_chain_close_checked(&ch, &rec, event));
cleanup:
  ce_chain_release(&ch);
  ce_pieces_release(&tp);
  ce_pieces_release(&op);
  ce_pieces_release(&p.pp);
  return status;
}

clembed_status clembed_embed(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                             const clembed_embed_options *opt, clembed_matrix *out, cl_uint nwait,
                             const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_embed");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  clembed_status status = embed_run(ctx, table, ids, opt, out, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

/* clembed_embed with the defaults, naming itself in its errors (deferred ones included). */
clembed_status clembed_lookup(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                              clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event) {
  cl_event own;
  CE_ENTER(ctx, "clembed_lookup");
  cl_event *ev = CE_EVENT_BEGIN(event, own);
  clembed_status status = embed_run(ctx, table, ids, NULL, out, nwait, wait, ev);
  return ce_track_end(ctx, status, event, &own);
}

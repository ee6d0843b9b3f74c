/* lookup / embed argument checks and enqueue. */
#include "internal.h"

#include <math.h>
#include <stdio.h>

clembed_embed_options clembed_embed_defaults(void) {
  clembed_embed_options o = {0};
  o.scale = 1.0f;
  o.policy = CLEMBED_INDEX_CHECK;
  o.padding_idx = CLEMBED_NO_PADDING;
  o.positions = CLEMBED_POSITIONS_NONE;
  o.sinusoid.base = 10000.0;
  o.sinusoid.exponent = CLEMBED_EXPONENT_PAIR;
  o.sinusoid.layout = CLEMBED_LAYOUT_INTERLEAVED;
  return o;
}

clembed_status ce_padding(clembed_context *ctx, int64_t padding_idx, size_t rows, const char *what, cl_long *out) {
  if (padding_idx == CLEMBED_NO_PADDING) {
    *out = -1;
    return CLEMBED_OK;
  }
  /* negative: counted from the end (-1 is the last row, as nn.Embedding) */
  int64_t p = padding_idx < 0 ? padding_idx + (int64_t)rows : padding_idx;
  if (p < 0 || (uint64_t)p >= (uint64_t)rows)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "padding_idx", -1, padding_idx,
                       "%s: padding_idx %lld is outside the table of %zu rows", what, (long long)padding_idx, rows);
  *out = p;
  return CLEMBED_OK;
}

clembed_status ce_check_common(clembed_context *ctx, const char *what, clembed_index_policy policy, float dropout,
                               size_t count, size_t seq_len, const clembed_ids *seq_offsets) {
  if ((unsigned)policy > CLEMBED_INDEX_WRAP)
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "policy", -1, (int64_t)policy,
                       "%s: unknown index policy %d", what, (int)policy);
  if (!(dropout >= 0.0f && dropout < 1.0f))
    return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "dropout", -1, 0, "%s: dropout %g is outside [0, 1)",
                       what, (double)dropout);
  if (seq_offsets) {
    clembed_status s = ce_check_ids(ctx, seq_offsets, "sequence_offsets");
    if (s != CLEMBED_OK) return s;
    size_t nseq = seq_len ? count / seq_len + (count % seq_len != 0) : 1;
    if (count && seq_offsets->count < nseq)
      return ce_fail_arg(ctx, CLEMBED_ERR_INVALID_ARGUMENT, NULL, "sequence_offsets", -1, (int64_t)seq_offsets->count,
                     "%s: sequence_offsets has %zu entries but %zu ids in sequences of %zu need %zu", what,
                     seq_offsets->count, count, seq_len, nseq);
  }
  return CLEMBED_OK;
}

/* 2-D nx x ny, or (one_d) 1-D over ny work-items with the CPU shapes' local
 * size; nothing to run (a marker for the event) when the range is empty. */
static clembed_status launch(clembed_context *ctx, cl_kernel k, const char *name, int one_d, size_t nx,
                             size_t ny, cl_uint nwait, const cl_event *wait, cl_event *event) {
  if (!one_d || ny == 0) return ce_enqueue_2d(ctx, k, name, one_d ? 1 : nx, ny, nwait, wait, event);
  return ce_enqueue_1d(ctx, k, name, ny, CE_LOCAL_CPU, nwait, wait, event);
}

clembed_status ce_enqueue_checked(clembed_context *ctx, cl_kernel k, const char *name, int one_d, size_t nx,
                                  size_t ny, ce_family family, const char *options, cl_uint slot, const clembed_ids *ids,
                                  const clembed_ids *so, size_t seq_len, cl_uint nwait, const cl_event *wait,
                                  cl_event *event) {
  clembed_status status = CLEMBED_OK;
  cl_event main_ev = NULL;
  if (slot == CE_NO_SLOT || ctx->atom64) return launch(ctx, k, name, one_d, nx, ny, nwait, wait, event);
  cl_kernel r;
  CHECK(ce_kernel(ctx, family, options, "ce_record_error", &r));
  cl_mem none = NULL;
  cl_mem idb = ids->buffer, sob = so ? so->buffer : none;
  cl_ulong id_off = ids->offset, so_off = so ? so->offset : 0, sl = seq_len;
  cl_int id64 = ids->type == CLEMBED_I64, so64 = so && so->type == CLEMBED_I64, has_so = so != NULL;
  CHECK(ce_set_args(ctx, r, "ce_record_error", CE_ARG(ctx->errbuf), CE_ARG(slot), CE_ARG(idb), CE_ARG(idb),
                    CE_ARG(id_off), CE_ARG(id64), CE_ARG(sob), CE_ARG(sob), CE_ARG(so_off), CE_ARG(so64),
                    CE_ARG(has_so), CE_ARG(sl), CE_END));
  CHECK(launch(ctx, k, name, one_d, nx, ny, nwait, wait, ctx->in_order ? NULL : &main_ev));
  /* in order: it waits on the caller's list too, so that its event fails when the list does */
  CHECK(ce_enqueue_1d(ctx, r, "ce_record_error", 1, 1, main_ev ? 1 : nwait, main_ev ? &main_ev : wait, event));
cleanup:
  if (main_ev) clReleaseEvent(main_ev);
  return status;
}

static clembed_status embed_run(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                                const clembed_embed_options *opt, clembed_matrix *out, cl_uint nwait,
                                const cl_event *wait, cl_event *event);

clembed_status clembed_lookup(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                              clembed_matrix *out, cl_uint nwait, const cl_event *wait, cl_event *event) {
  return clembed_embed(ctx, table, ids, NULL, out, nwait, wait, event);
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

static clembed_status embed_run(clembed_context *ctx, const clembed_matrix *table, const clembed_ids *ids,
                                const clembed_embed_options *opt, clembed_matrix *out, cl_uint nwait,
                                const cl_event *wait, cl_event *event) {
  clembed_status status = CLEMBED_OK;
  clembed_embed_options defaults;
  size_t t_ld, o_ld, p_ld = 0;
  cl_long padding;
  cl_mem freq = NULL;
  cl_kernel k;
  char opts[192];
  if (!opt) {
    defaults = clembed_embed_defaults();
    opt = &defaults;
  }
  CHECK(ce_check_events(ctx, nwait, wait));
  CHECK(ce_check_matrix(ctx, table, "table", &t_ld));
  CHECK(ce_check_ids(ctx, ids, "ids"));
  CHECK(ce_check_matrix(ctx, out, "out", &o_ld));
  if (out->rows != ids->count || out->cols != table->cols)
    FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "out", -1, (int64_t)out->rows,
             "out is %zu x %zu but %zu ids of a table with %zu cols need %zu x %zu",
         out->rows, out->cols, ids->count, table->cols, ids->count, table->cols);
  CHECK(ce_check_common(ctx, "clembed_embed", opt->policy, opt->dropout, ids->count, opt->seq_len,
                        opt->sequence_offsets));
  CHECK(ce_padding(ctx, opt->padding_idx, table->rows, "clembed_embed", &padding));
  const clembed_matrix *pt = NULL;
  int cached_pe = 0;
  switch (opt->positions) {
    case CLEMBED_POSITIONS_NONE: break;
    case CLEMBED_POSITIONS_SINUSOID: {
      CHECK(ce_sinusoid_check(ctx, &opt->sinusoid));
      /* Without per-sequence offsets the positions are [offset, offset + span): read
       * them from the context's cached table (the same float values) rather than
       * computing sin/cos per element. */
      size_t span = opt->seq_len && opt->seq_len < ids->count ? opt->seq_len : ids->count, end;
      if (!opt->sequence_offsets && !ce_add_overflows(opt->position_offset, span, &end))
        CHECK(ce_sinusoid_table(ctx, &opt->sinusoid, table->cols, end, ids->count, &pt));
      if (pt) {
        cached_pe = 1;
        p_ld = pt->cols;
      } else {
        CHECK(ce_sinusoid_freq(ctx, &opt->sinusoid, table->cols, &freq));
      }
      break;
    }
    case CLEMBED_POSITIONS_TABLE:
      pt = opt->position_table;
      CHECK(ce_check_matrix(ctx, pt, "position_table", &p_ld));
      if (pt->cols != table->cols)
        FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "position_table", -1, (int64_t)pt->cols,
                 "position_table has %zu cols but the table has %zu", pt->cols,
             table->cols);
      break;
    default:
      FAIL_ARG(CLEMBED_ERR_INVALID_ARGUMENT, "positions", -1, (int64_t)opt->positions,
               "clembed_embed: unknown positions %d", (int)opt->positions);
  }
  const clembed_ids *so = opt->positions != CLEMBED_POSITIONS_NONE ? opt->sequence_offsets : NULL;
  int positions = cached_pe ? (int)CLEMBED_POSITIONS_TABLE : (int)opt->positions, dropout = opt->dropout > 0.0f;
  /* CPU shapes: whole rows of 4 tokens per work-item, 16 columns at a time
   * (measured on POCL: 1.6x the column shape for rows gathered at random, the
   * sinusoid 16 columns at once). GPU shapes: four columns per work-item when
   * the rows allow. */
  int rows = ctx->cpu_shapes ? 4 : 0;
  /* ...and with positions shared by several sequences, a work-item takes one
   * position of 8 sequences, which reads each position row once from memory
   * (measured on POCL, batch 8 x 2048: 1.1x with 4 sequences, 1.04x more
   * with 8) */
  int strided = rows && positions != (int)CLEMBED_POSITIONS_NONE && !so && opt->seq_len &&
                ids->count / opt->seq_len >= 2;
  if (strided) rows = 8;
  /* ...and an output larger than the device's cache goes out with streaming
   * stores: it would not stay in the cache anyway, and a plain store first
   * reads each line (measured on POCL: lookup 1.25x faster) */
  size_t out_bytes = ids->count * table->cols * clembed_dtype_size(out->dtype);
  int stream = rows && ctx->cache_bytes && out_bytes > ctx->cache_bytes;
  int vw = table->cols % 4 == 0 ? 4 : 1;
  snprintf(opts, sizeof opts,
           "-DTABLE_DT=%d -DOUT_DT=%d -DPOSITIONS=%d -DPOS_DT=%d -DDROPOUT=%d -DROWS=%d -DSTRIDED=%d -DSTREAM=%d "
           "-DVEC=16 -DVW=%d",
           (int)table->dtype, (int)out->dtype, positions, pt ? (int)pt->dtype : 0, dropout, rows, strided, stream,
           vw);
  CHECK(ce_kernel(ctx, CE_FAMILY_FORWARD, opts, "ce_embed", &k));

  cl_uint slot = CE_NO_SLOT;
  /* an operation that can find a bad id or position gets an error slot (CLAMP
   * cannot clamp into a table of 0 rows: those ids are reported too; positions
   * are signed on the device, so an offset past 2^63 - 1 is a bad position) */
  int can_fail = opt->policy == CLEMBED_INDEX_CHECK || opt->policy == CLEMBED_INDEX_WRAP ||
                 (opt->policy == CLEMBED_INDEX_CLAMP && table->rows == 0) || (pt && !cached_pe) || so ||
                 (opt->positions != CLEMBED_POSITIONS_NONE && opt->position_offset > (size_t)INT64_MAX);
  if (ids->count && can_fail) {
    ce_slot_info info = {"clembed_embed", "position_table", opt->policy == CLEMBED_INDEX_WRAP, table->rows,
                         pt ? pt->rows : 0, opt->seq_len, opt->position_offset, so != NULL};
    CHECK(ce_slot_reserve(ctx, &info, &slot));
  }
  cl_mem none = NULL, idb = ids->buffer, sob = so ? so->buffer : none, ptb = pt ? pt->buffer : none;
  cl_ulong t_off = table->offset, t_ldl = t_ld, t_rows = table->rows, id_off = ids->offset, n = ids->count;
  cl_ulong o_off = out->offset, o_ldl = o_ld, cols = table->cols;
  cl_ulong p_off = pt ? pt->offset : 0, p_ldl = p_ld, p_rows = pt ? pt->rows : 0;
  cl_ulong seq_len = opt->seq_len, pos_offset = opt->position_offset, so_off = so ? so->offset : 0;
  cl_int id64 = ids->type == CLEMBED_I64, so64 = so && so->type == CLEMBED_I64, has_so = so != NULL;
  cl_int policy = (cl_int)opt->policy;
  cl_float scale = opt->scale, drop = opt->dropout, keep = dropout ? 1.0f / (1.0f - opt->dropout) : 1.0f;
  cl_uint seed_lo = (cl_uint)opt->dropout_seed, seed_hi = (cl_uint)(opt->dropout_seed >> 32);
  cl_uint slot_arg = slot == CE_NO_SLOT ? 0 : slot;
  CHECK(ce_set_args(ctx, k, "ce_embed", CE_ARG(table->buffer), CE_ARG(t_off), CE_ARG(t_ldl), CE_ARG(t_rows),
                    CE_ARG(idb), CE_ARG(idb), CE_ARG(id_off), CE_ARG(id64), CE_ARG(n), CE_ARG(out->buffer),
                    CE_ARG(o_off), CE_ARG(o_ldl), CE_ARG(cols), CE_ARG(scale), CE_ARG(policy), CE_ARG(padding),
                    CE_ARG(freq), CE_ARG(ptb), CE_ARG(p_off), CE_ARG(p_ldl), CE_ARG(p_rows), CE_ARG(seq_len),
                    CE_ARG(pos_offset), CE_ARG(sob), CE_ARG(sob), CE_ARG(so_off), CE_ARG(so64), CE_ARG(has_so),
                    CE_ARG(drop), CE_ARG(seed_lo), CE_ARG(seed_hi), CE_ARG(keep), CE_ARG(ctx->errbuf),
                    CE_ARG(slot_arg), CE_END));
  /* CPU shapes: 1-D, one work-item per `rows` tokens; GPU shapes: x across a
   * row (16 columns per work-item with VW 4), y over the tokens. With 0
   * columns nothing runs (and no id is checked) in either shape. */
  size_t nx = vw == 4 ? (table->cols / 4 + 3) / 4 : table->cols;
  size_t ny = table->cols ? ids->count : 0;
  if (strided && ny) { /* seq_len items for each `rows` sequences */
    size_t nseq = ids->count / opt->seq_len + (ids->count % opt->seq_len != 0);
    ny = (nseq / rows + (nseq % rows != 0)) * opt->seq_len;
  } else if (rows) {
    ny = ny / rows + (ny % rows != 0);
  }
  CHECK(ce_enqueue_checked(ctx, k, "ce_embed", rows != 0, nx, ny, CE_FAMILY_FORWARD, opts, slot, ids, so, opt->seq_len,
                           nwait, wait, event));
cleanup:
  return status;
}
